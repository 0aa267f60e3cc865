package motoserver

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill moto_server when the test process that
// started it exits, however it exits: a shared server has no test to stop it.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
