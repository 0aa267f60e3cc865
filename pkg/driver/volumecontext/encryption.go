package volumecontext

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Node-side encryption: the volume-context key CreateVolume writes from the
// StorageClass parameter of the same name, and the secret key the node reads
// the passphrase from.
const (
	// NodeEncryptionKey asks the node to encrypt the volume itself, with a
	// key the cloud never sees. Its only value is NodeEncryptionLUKS2. It is
	// named apart from EBS's own encryption (encrypted, kmsKeyId), which the
	// cloud does with its keys; the two can be combined.
	NodeEncryptionKey = "nodeEncryption"
	// NodeEncryptionLUKS2 encrypts the volume with LUKS2 (dm-crypt) on the
	// node: AES-XTS, a 512-bit key, Argon2id.
	NodeEncryptionLUKS2 = "luks2"
	// PassphraseSecretKey is the key of the LUKS passphrase in the node-stage
	// secret (NodeStageVolume) and the node-expand secret
	// (NodeExpandVolume). The passphrase is the value's bytes, exactly.
	PassphraseSecretKey = "luksPassphrase"
)

// NodeEncryption returns the node-side encryption a volume context asks for:
// NodeEncryptionLUKS2, or "" for none. An unknown value is an error: a
// volume meant to be encrypted must never be formatted in the clear.
func NodeEncryption(ctx map[string]string) (string, error) {
	for k, v := range ctx {
		if !strings.EqualFold(k, NodeEncryptionKey) {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(v)) {
		case NodeEncryptionLUKS2:
			return NodeEncryptionLUKS2, nil
		case "", "none", "false":
			return "", nil
		default:
			return "", fmt.Errorf("%s %q: want %s (or leave it out)", NodeEncryptionKey, v, NodeEncryptionLUKS2)
		}
	}
	return "", nil
}

// Where the key of a volume encrypted on the node comes from: the
// StorageClass parameters of these names, which CreateVolume copies into
// the volume context with what KMS answered.
const (
	// NodeEncryptionKeySourceKey names the key source: KeySourceSecret (the
	// default) or KeySourceKMS.
	NodeEncryptionKeySourceKey = "nodeEncryptionKeySource"
	// KeySourceSecret opens the volume with the passphrase of the
	// node-stage secret (PassphraseSecretKey).
	KeySourceSecret = "secret"
	// KeySourceKMS opens the volume with a random key that KMS wraps and
	// only a pod whose own role may decrypt it unwraps: the node holds no
	// credentials, and each pod's publish is authorised with its token.
	KeySourceKMS = "kms"
	// NodeEncryptionKMSKeyIDKey is the KMS key that wraps the volume key:
	// in the StorageClass an ID, ARN or alias; in the volume context the
	// key's ARN, as KMS answered.
	NodeEncryptionKMSKeyIDKey = "nodeEncryptionKmsKeyId"
	// NodeEncryptionRoleARNKey is the IAM role pods assume with their
	// service-account token to unwrap the key.
	NodeEncryptionRoleARNKey = "nodeEncryptionRoleArn"
	// NodeEncryptionWrappedKeyKey holds the wrapped volume key (base64 of
	// KMS's ciphertext blob); CreateVolume writes it, never a user.
	NodeEncryptionWrappedKeyKey = "nodeEncryptionWrappedKey"
	// NodeEncryptionKeyNamespaceKey is the namespace the wrapped key is
	// bound to by its encryption context (the claim's); CreateVolume writes
	// it, and a key wrapped without one has none.
	NodeEncryptionKeyNamespaceKey = "nodeEncryptionKeyNamespace"
	// NodeEncryptionOnRevocationKey says what the node does when a pod's
	// access to a mounted volume's key is revoked (a refused republish):
	// RevocationKeep or RevocationReadOnly.
	NodeEncryptionOnRevocationKey = "nodeEncryptionOnRevocation"
	// RevocationKeep leaves the pod its mount as it was (the default):
	// the revocation is reported, and the pod loses the volume when it
	// stops.
	RevocationKeep = "keep"
	// RevocationReadOnly fences the volume on that node: its filesystem
	// is remounted read-only, for every pod there, until a later token is
	// authorised.
	RevocationReadOnly = "read-only"
)

// OnRevocation reads NodeEncryptionOnRevocationKey: whether a revocation
// fences the volume read-only (RevocationKeep when it is not set). An
// unknown value is an error.
func OnRevocation(ctx map[string]string) (readOnly bool, err error) {
	v, _ := lookupFold(ctx, NodeEncryptionOnRevocationKey)
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", RevocationKeep:
		return false, nil
	case RevocationReadOnly:
		return true, nil
	}
	return false, fmt.Errorf("%s %q: want %s or %s", NodeEncryptionOnRevocationKey, v, RevocationKeep, RevocationReadOnly)
}

// KeySource returns where the key of a volume encrypted on the node comes
// from: KeySourceSecret (also when the context does not say) or
// KeySourceKMS. An unknown value is an error.
func KeySource(ctx map[string]string) (string, error) {
	v, _ := lookupFold(ctx, NodeEncryptionKeySourceKey)
	switch s := strings.ToLower(strings.TrimSpace(v)); s {
	case "", KeySourceSecret:
		return KeySourceSecret, nil
	case KeySourceKMS:
		return KeySourceKMS, nil
	default:
		return "", fmt.Errorf("%s %q: want %s or %s", NodeEncryptionKeySourceKey, v, KeySourceSecret, KeySourceKMS)
	}
}

// KMSKey is what a node needs to unwrap the key of a volume whose key
// source is KMS.
type KMSKey struct {
	// KeyID is the KMS key's ARN.
	KeyID string
	// RoleARN is the role a pod assumes to unwrap it.
	RoleARN string
	// Wrapped is KMS's ciphertext of the volume key.
	Wrapped []byte
	// Namespace is the namespace its encryption context binds it to;
	// empty for a key bound to its volume only.
	Namespace string
	// FenceOnRevocation: a revoked republish remounts the volume's
	// filesystem read-only on the node (RevocationReadOnly).
	FenceOnRevocation bool
}

// KMSKeyOf reads a KMS-sourced volume's key from its volume context. A
// missing or malformed entry is an error naming it: the volume was not
// provisioned with it, or its PersistentVolume was edited.
func KMSKeyOf(ctx map[string]string) (KMSKey, error) {
	var k KMSKey
	var missing []string
	var wrapped string
	for key, dst := range map[string]*string{
		NodeEncryptionKMSKeyIDKey:   &k.KeyID,
		NodeEncryptionRoleARNKey:    &k.RoleARN,
		NodeEncryptionWrappedKeyKey: &wrapped,
	} {
		v, _ := lookupFold(ctx, key)
		if *dst = strings.TrimSpace(v); *dst == "" {
			missing = append(missing, key)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return KMSKey{}, fmt.Errorf("%s %s has no %s (CreateVolume writes them; was the PersistentVolume written by hand?)",
			NodeEncryptionKeySourceKey, KeySourceKMS, strings.Join(missing, ", "))
	}
	if err := CheckRoleARN(k.RoleARN); err != nil {
		return KMSKey{}, err
	}
	b, err := base64.StdEncoding.DecodeString(wrapped)
	if err != nil || len(b) == 0 {
		return KMSKey{}, fmt.Errorf("%s is not base64 of a KMS ciphertext", NodeEncryptionWrappedKeyKey)
	}
	k.Wrapped = b
	ns, _ := lookupFold(ctx, NodeEncryptionKeyNamespaceKey)
	k.Namespace = strings.TrimSpace(ns)
	if k.FenceOnRevocation, err = OnRevocation(ctx); err != nil {
		return KMSKey{}, err
	}
	return k, nil
}

// VolumeContext renders the key into volume-context entries.
func (k KMSKey) VolumeContext() map[string]string {
	ctx := map[string]string{
		NodeEncryptionKeySourceKey:  KeySourceKMS,
		NodeEncryptionKMSKeyIDKey:   k.KeyID,
		NodeEncryptionRoleARNKey:    k.RoleARN,
		NodeEncryptionWrappedKeyKey: base64.StdEncoding.EncodeToString(k.Wrapped),
	}
	if k.Namespace != "" {
		ctx[NodeEncryptionKeyNamespaceKey] = k.Namespace
	}
	if k.FenceOnRevocation {
		ctx[NodeEncryptionOnRevocationKey] = RevocationReadOnly
	}
	return ctx
}

// roleARNPattern is an IAM role's ARN in any partition.
var roleARNPattern = regexp.MustCompile(`^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$`)

// CheckRoleARN refuses what cannot be an IAM role's ARN.
func CheckRoleARN(arn string) error {
	if !roleARNPattern.MatchString(arn) {
		return fmt.Errorf("%s %q is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)", NodeEncryptionRoleARNKey, arn)
	}
	return nil
}

// lookupFold finds a key without regard to case, as StorageClass keys match.
func lookupFold(ctx map[string]string, key string) (string, bool) {
	for k, v := range ctx {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return "", false
}
