package node

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/mounter"
)

// The StorageClass parameters that make the provisioner write a volume's
// node-stage and node-expand secret references; named in errors, since the
// node can only say what is missing, not fix it.
const (
	stageSecretParams  = "csi.storage.k8s.io/node-stage-secret-name and csi.storage.k8s.io/node-stage-secret-namespace"
	expandSecretParams = "csi.storage.k8s.io/node-expand-secret-name and csi.storage.k8s.io/node-expand-secret-namespace"
)

// nodeEncryption returns whether a volume context asks the node to encrypt
// the volume, or InvalidArgument for an encryption the node does not know,
// or cannot do on its operating system: such a volume must never be
// formatted in the clear.
func (s *Service) nodeEncryption(ctx map[string]string) (bool, error) {
	enc, err := volumecontext.NodeEncryption(ctx)
	if err != nil {
		return false, status.Errorf(codes.InvalidArgument, "volume context: %v", err)
	}
	if enc != "" && !s.platform.Encryption {
		return false, status.Errorf(codes.InvalidArgument, "volume encryption on the node (%s: %s) is not supported on %s nodes",
			volumecontext.NodeEncryptionKey, enc, s.platform.OS)
	}
	return enc != "", nil
}

// passphrase returns the LUKS passphrase of a request's secrets as bytes the
// caller clears after use (wipe), or nil when there is none. The secrets
// map's strings stay as the gRPC layer made them; nothing else copies them.
func passphrase(secrets map[string]string) []byte {
	p, ok := secrets[volumecontext.PassphraseSecretKey]
	if !ok || p == "" {
		return nil
	}
	return []byte(p)
}

// wipe overwrites a passphrase once it has been used.
func wipe(b []byte) { clear(b) }

// stagePassphrase is passphrase for NodeStageVolume, which cannot go on
// without one: InvalidArgument naming the StorageClass parameters to set.
func stagePassphrase(volumeID string, secrets map[string]string) ([]byte, error) {
	p := passphrase(secrets)
	if p == nil {
		return nil, status.Errorf(codes.InvalidArgument,
			"volume %s is encrypted on the node (%s: %s), but NodeStageVolume got no %q in its secrets: set %s in the StorageClass "+
				"to a Secret holding the volume's passphrase under %q (docs/encryption.md)",
			volumeID, volumecontext.NodeEncryptionKey, volumecontext.NodeEncryptionLUKS2, volumecontext.PassphraseSecretKey,
			stageSecretParams, volumecontext.PassphraseSecretKey)
	}
	return p, nil
}

// Where the key that opens a volume's LUKS header came from, for errors
// that say what to fix.
const (
	stageSecret  = "node-stage"
	expandSecret = "node-expand"
	// fromKMS: the key KMS unwrapped for the volume (nodeEncryptionKeySource: kms).
	fromKMS = "kms"
)

// openEncrypted opens (formatting when blank) the LUKS mapping of a
// verified device with key, checked against the header and grown to the
// device, and returns the mapping's device. from says where the key came
// from.
func (s *Service) openEncrypted(ctx context.Context, volumeID, device string, key mounter.LUKSKey, from string) (string, error) {
	mapping, err := s.os.OpenEncrypted(ctx, volumeID, device, key)
	if err != nil {
		return "", encryptionError(ctx, fmt.Sprintf("open the encrypted volume %s (%s)", volumeID, device), from, err)
	}
	return mapping, nil
}

// encryptionError is osError for LUKS work: a key no key slot takes is
// PermissionDenied, a passphrase the work needs and did not get, or a node
// that cannot open LUKS at all, FailedPrecondition with what to do. from
// names the secret the passphrase came from, or fromKMS.
func encryptionError(ctx context.Context, doing, from string, err error) error {
	switch {
	case errors.Is(err, mounter.ErrWrongPassphrase) && from == fromKMS:
		return status.Errorf(codes.PermissionDenied, "%s: %v: the key KMS unwrapped does not open it, so its volume context's %s is not this volume's "+
			"(the PersistentVolume was edited?; nothing was written)", doing, err, volumecontext.NodeEncryptionWrappedKeyKey)
	case errors.Is(err, mounter.ErrWrongPassphrase):
		return status.Errorf(codes.PermissionDenied, "%s: %v: the %s secret's %q is not this volume's passphrase (nothing was written)",
			doing, err, from, volumecontext.PassphraseSecretKey)
	case errors.Is(err, mounter.ErrPassphraseNeeded):
		return status.Errorf(codes.FailedPrecondition, "%s: %v: set %s in the StorageClass to a Secret holding the passphrase under %q",
			doing, err, expandSecretParams, volumecontext.PassphraseSecretKey)
	case errors.Is(err, mounter.ErrEncryptionUnavailable), errors.Is(err, mounter.ErrLUKSTooCostly):
		return status.Errorf(codes.FailedPrecondition, "%s: %v", doing, err)
	default:
		return osError(ctx, doing, err)
	}
}

// stagedMapping returns the open LUKS mapping of an encrypted volume whose
// verified device is device: FailedPrecondition when NodeStageVolume has not
// opened it, or when it sits on another device.
func (s *Service) stagedMapping(volumeID, device string) (string, error) {
	mapping, under, err := s.os.EncryptedMapping(volumeID)
	switch {
	case err != nil:
		return "", status.Errorf(codes.Internal, "find the encrypted mapping of volume %s: %v", volumeID, err)
	case mapping == "":
		return "", status.Errorf(codes.FailedPrecondition, "encrypted volume %s is not staged (its LUKS mapping is not open); stage it first", volumeID)
	case under != device:
		return "", status.Errorf(codes.FailedPrecondition, "the LUKS mapping of volume %s sits on %s, not on the volume's device %s", volumeID, under, device)
	}
	return mapping, nil
}

// closeEncrypted closes the volume's LUKS mapping if one is open.
func (s *Service) closeEncrypted(ctx context.Context, volumeID string) error {
	mapping, _, err := s.os.EncryptedMapping(volumeID)
	if err != nil {
		return status.Errorf(codes.Internal, "find the encrypted mapping of volume %s: %v", volumeID, err)
	}
	if mapping == "" {
		return nil
	}
	if err := s.os.CloseEncrypted(ctx, volumeID); err != nil {
		return osError(ctx, fmt.Sprintf("close the encrypted mapping of volume %s", volumeID), err)
	}
	return nil
}
