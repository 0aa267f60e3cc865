package volumecontext

import (
	"fmt"
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
