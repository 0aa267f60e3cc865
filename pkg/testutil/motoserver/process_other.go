//go:build !linux

package motoserver

import "os/exec"

// dieWithParent does nothing here: make test-moto runs on Linux only.
func dieWithParent(*exec.Cmd) {}
