//go:build !linux && !windows

package mounter

import (
	"errors"
	"runtime"
)

// New reports that the node service has no implementation for this
// operating system: Diskplane's nodes are Linux and Windows.
func New(Options) (Mounter, error) {
	return nil, errors.New("the node service is not supported on " + runtime.GOOS)
}
