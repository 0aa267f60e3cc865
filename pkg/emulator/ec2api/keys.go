package ec2api

import (
	"errors"

	"github.com/diskplane/diskplane/pkg/emulator/kms"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// EC2's codes for a KmsKeyId it cannot use.
const (
	codeInvalidKMSKeyNotFound     = "InvalidKMSKey.NotFound"
	codeInvalidKMSKeyInvalidState = "InvalidKMSKey.InvalidState"
)

// checkKey refuses an encrypted volume's KmsKeyId that names no key of the
// emulator's KMS, or a disabled one. (EC2 accepts such a request and fails
// the volume later; refusing it at once tells a caller the same thing
// sooner.) A KmsKeyId without Encrypted is left to the model, which refuses
// it for that.
func (h *handler) checkKey(keyID string, encrypted *bool) error {
	if h.keys == nil || keyID == "" || encrypted == nil || !*encrypted {
		return nil
	}
	switch err := h.keys.Usable(keyID); {
	case errors.Is(err, kms.ErrKeyDisabled):
		return model.Errorf(codeInvalidKMSKeyInvalidState, "The KMS key %s is disabled.", keyID)
	case err != nil:
		return model.Errorf(codeInvalidKMSKeyNotFound, "The KMS key %s does not exist.", keyID)
	}
	return nil
}
