//go:build !linux

package mounter

import (
	"errors"
	"runtime"
)

// New reports that this operating system has no node implementation yet;
// the Windows node (on csi-proxy) comes in a later release.
func New(Options) (Mounter, error) {
	return nil, errors.New("the node service is not supported on " + runtime.GOOS + " yet")
}
