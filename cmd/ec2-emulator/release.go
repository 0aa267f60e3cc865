package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
)

// releaseDevicesCommand removes the host's loop devices and by-id links of
// a stopped emulator.
const releaseDevicesCommand = "release-devices"

// releaseDevices removes every loop device and link the emulator made for
// its data directory, without touching its state: volumes attached to the
// local instance stay attached, and the next start makes their devices
// again. Teardown scripts run it after stopping the emulator, so that no
// loop device outlives a demo or a test run.
func releaseDevices(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ec2-emulator "+releaseDevicesCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", defaultDataDir, "the stopped emulator's --data-dir")
	linkDir := fs.String("device-link-dir", disks.DefaultLinkDir, "the stopped emulator's --device-link-dir")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	store, err := disks.NewLoopStore(*dataDir, *linkDir)
	if err == nil {
		err = store.Reconcile(nil)
	}
	if err != nil {
		fmt.Fprintf(stderr, "release the devices: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "released the loop devices and links of %s\n", *dataDir)
	return 0
}
