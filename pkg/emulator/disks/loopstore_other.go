//go:build !linux

package disks

import (
	"errors"
	"runtime"

	"github.com/diskplane/diskplane/pkg/emulator/guestagent"
)

// ErrLoopDevicesUnsupported is what NewLoopStore answers on an operating
// system without Linux loop devices; the emulator runs there only with
// --no-devices.
var ErrLoopDevicesUnsupported = errors.New("the loop-device disk store needs Linux; run the emulator with --no-devices on " + runtime.GOOS)

// NewLoopStore fails on this operating system: real disks are Linux loop
// devices.
func NewLoopStore(dataDir, linkDir string) (Store, error) {
	return nil, ErrLoopDevicesUnsupported
}

// NewGuestStore fails on this operating system: it keeps images as the loop
// store does.
func NewGuestStore(dataDir, guestDataDir string, agent guestagent.Exposer) (Store, error) {
	return nil, ErrLoopDevicesUnsupported
}
