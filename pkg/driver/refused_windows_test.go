package driver

import (
	"fmt"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/windows"
)

// TestConnectionRefusedWindows checks that a dial error as Winsock reports
// it for a socket nobody serves counts as refused, so a stale socket left
// by a crash is removed and the plugin starts again.
func TestConnectionRefusedWindows(t *testing.T) {
	stale := &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", windows.WSAECONNREFUSED)}
	if !connectionRefused(stale) {
		t.Errorf("%v is not counted as refused", stale)
	}
	if connectionRefused(fmt.Errorf("dial: %w", windows.WSAEACCES)) {
		t.Error("access denied is counted as refused")
	}
}
