//go:build !linux

package disks

import (
	"errors"
	"runtime"
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
