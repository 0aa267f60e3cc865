package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"testing"
)

// privateMountNamespaceEnv marks a test binary that RunInPrivateMountNamespace
// has already started in a mount namespace of its own.
const privateMountNamespaceEnv = "DISKPLANE_TEST_PRIVATE_MOUNT_NAMESPACE"

// RunInPrivateMountNamespace runs a package's tests (m) in a mount
// namespace of their own, private to them, when they run as root; as
// another user it just runs them. It returns their exit code. A package
// whose root tests mount filesystems calls it from TestMain. Without it,
// every mount namespace another process makes meanwhile on the machine (a
// container starting, a test of another package) copies the test's
// mounts, since the machine's mounts are private, and keeps their devices
// open until that namespace ends: the test's unmount then leaves a loop
// device busy for minutes. In a namespace of its own, nothing outside can
// copy what the test mounts.
func RunInPrivateMountNamespace(m *testing.M) int {
	if os.Geteuid() != 0 || os.Getenv(privateMountNamespaceEnv) == "1" {
		return m.Run()
	}
	return runAgainInPrivateMountNamespace()
}

// runAgainInPrivateMountNamespace starts this test binary again, with the same
// arguments, in a new mount namespace whose mounts are all private (Go's
// exec makes them so with CLONE_NEWNS), and returns its exit code. Signals
// that stop a test run are passed on, and the child dies with this process.
func runAgainInPrivateMountNamespace() int {
	// The parent-death signal follows the thread that started the child.
	runtime.LockOSThread()
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Env = append(os.Environ(), privateMountNamespaceEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig:    syscall.SIGKILL,
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "starting the tests in a mount namespace of their own: %v\n", err)
		return 1
	}
	go func() {
		for sig := range signals {
			_ = cmd.Process.Signal(sig)
		}
	}()
	err := cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "the tests in their own mount namespace: %v\n", err)
		return 1
	}
}
