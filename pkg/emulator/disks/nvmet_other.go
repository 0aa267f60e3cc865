//go:build !linux

package disks

import (
	"errors"
	"runtime"

	"github.com/diskplane/diskplane/pkg/emulator/guestagent"
)

// NewNVMeTarget fails on this operating system: the guest agent exposes
// volumes through Linux's NVMe target.
func NewNVMeTarget() (guestagent.Exposer, error) {
	return nil, errors.New("the guest agent needs Linux's NVMe target, not " + runtime.GOOS)
}
