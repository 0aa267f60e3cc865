//go:build !windows

package driver

import (
	"errors"
	"syscall"
)

// connectionRefused reports whether a dial failed because nothing listens
// on the socket: a stale socket file left by a crashed plugin.
func connectionRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
