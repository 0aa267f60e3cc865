package parameters

import (
	"strings"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

// NodeEncryptionKey is where the key of a volume the node encrypts comes
// from: the StorageClass's nodeEncryptionKeySource and, for KMS, the key
// that wraps the volume key and the role whose pods may unwrap it.
type NodeEncryptionKey struct {
	// Source is volumecontext.KeySourceSecret or KeySourceKMS; empty
	// when the StorageClass does not say (the secret).
	Source string
	// KMSKeyID is the KMS key as the StorageClass names it.
	KMSKeyID string
	// RoleARN is the IAM role pods assume to unwrap the key.
	RoleARN string
	// FenceOnRevocation: a pod whose access is revoked while mounted has
	// the volume's filesystem remounted read-only on its node
	// (nodeEncryptionOnRevocation: read-only); onRevocationSet says the
	// class named it at all.
	FenceOnRevocation bool
	onRevocationSet   bool
}

// KMS reports whether the volume key is one KMS wraps.
func (k NodeEncryptionKey) KMS() bool { return k.Source == volumecontext.KeySourceKMS }

// set reads one of the four parameters.
func (k *NodeEncryptionKey) set(key, lower, value string) error {
	value = strings.TrimSpace(value)
	switch lower {
	case strings.ToLower(KeyNodeEncryptionKeySource):
		source, err := volumecontext.KeySource(map[string]string{volumecontext.NodeEncryptionKeySourceKey: value})
		if err != nil {
			return invalid(key, "is %q: want %s (the node-stage secret's passphrase) or %s (a key KMS wraps, unwrapped with each pod's own identity; see docs/encryption.md)",
				value, volumecontext.KeySourceSecret, volumecontext.KeySourceKMS)
		}
		k.Source = source
	case strings.ToLower(KeyNodeEncryptionKMSKeyID):
		if value == "" || strings.ContainsAny(value, " \t\n") || len(value) > 2048 {
			return invalid(key, "is %q: want a KMS key ID, key ARN, alias (alias/<name>) or alias ARN", value)
		}
		k.KMSKeyID = value
	case strings.ToLower(KeyNodeEncryptionRoleARN):
		if err := volumecontext.CheckRoleARN(value); err != nil {
			return invalid(key, "is %q: want an IAM role ARN (arn:aws:iam::<account>:role/<name>)", value)
		}
		k.RoleARN = value
	case strings.ToLower(KeyNodeEncryptionOnRevocation):
		fence, err := volumecontext.OnRevocation(map[string]string{volumecontext.NodeEncryptionOnRevocationKey: value})
		if err != nil {
			return invalid(key, "is %q: want %s (the pod keeps its mount; the default) or %s (the volume's filesystem on that node is remounted read-only; see docs/encryption.md)",
				value, volumecontext.RevocationKeep, volumecontext.RevocationReadOnly)
		}
		k.FenceOnRevocation, k.onRevocationSet = fence, true
	}
	return nil
}

// check refuses a combination the node could not act on: a KMS key
// source without node encryption, its key or its role, and a key, role or
// revocation behaviour without the KMS key source.
func (k NodeEncryptionKey) check(nodeEncryption string) error {
	switch {
	case k.KMS() && nodeEncryption == "":
		return invalid(KeyNodeEncryptionKeySource, "is %s, but %s is not set: add %s: %s", volumecontext.KeySourceKMS,
			KeyNodeEncryption, KeyNodeEncryption, volumecontext.NodeEncryptionLUKS2)
	case k.KMS() && k.KMSKeyID == "":
		return invalid(KeyNodeEncryptionKeySource, "is %s and needs %s (the KMS key that wraps each volume's key)", volumecontext.KeySourceKMS, KeyNodeEncryptionKMSKeyID)
	case k.KMS() && k.RoleARN == "":
		return invalid(KeyNodeEncryptionKeySource, "is %s and needs %s (the IAM role whose pods may unwrap the key)", volumecontext.KeySourceKMS, KeyNodeEncryptionRoleARN)
	case !k.KMS() && k.KMSKeyID != "":
		return invalid(KeyNodeEncryptionKMSKeyID, "is set, but %s is not %s", KeyNodeEncryptionKeySource, volumecontext.KeySourceKMS)
	case !k.KMS() && k.RoleARN != "":
		return invalid(KeyNodeEncryptionRoleARN, "is set, but %s is not %s", KeyNodeEncryptionKeySource, volumecontext.KeySourceKMS)
	case !k.KMS() && k.onRevocationSet:
		return invalid(KeyNodeEncryptionOnRevocation, "is set, but %s is not %s: only a key unlocked with the pod's identity can be revoked",
			KeyNodeEncryptionKeySource, volumecontext.KeySourceKMS)
	}
	return nil
}
