package driver

import (
	"errors"

	"golang.org/x/sys/windows"
)

// connectionRefused reports whether a dial failed because nothing listens
// on the socket: a stale socket file left by a crashed plugin. Winsock
// reports that as WSAECONNREFUSED, which Go does not match with
// syscall.ECONNREFUSED on Windows.
func connectionRefused(err error) bool { return errors.Is(err, windows.WSAECONNREFUSED) }
