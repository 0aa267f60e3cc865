//go:build windows || (linux && wine)

package windows

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/driver/controller"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// driverName is the plugin's default CSI driver name.
const driverName = "ebs.csi.diskplane.io"

// startCloud starts an EC2 emulator (state only: the Windows host keeps
// what is on the disks) with one zone and the controller service over it,
// wired as cmd/diskplane wires it, with the tuning tests/sanity uses for an
// emulator whose state changes are instant. The controller finds the
// emulator through the SDK's standard settings, which this sets for the
// process.
func startCloud(t *testing.T) (*emulatortest.Env, *controller.Service) {
	t.Helper()
	env := emulatortest.Start(t, emulatortest.Options{Zones: []model.Zone{{Name: "us-east-1a", ID: "use1-az1"}}})
	env.Setenv(t)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := cloud.New(ctx, cloud.Config{
		BatchMaxDelay:   2 * time.Millisecond,
		PollInterval:    10 * time.Millisecond,
		ColdFirstLook:   10 * time.Millisecond,
		PollMaxInterval: 100 * time.Millisecond,
		MaxRetryBackoff: 200 * time.Millisecond,
	})
	if err != nil {
		cancel()
		t.Fatalf("cloud: %v", err)
	}
	ctrl, err := controller.New(c, controller.Options{DriverName: driverName, ModifyCoalesceWindow: 10 * time.Millisecond})
	if err != nil {
		cancel()
		c.Close()
		t.Fatalf("controller: %v", err)
	}
	t.Cleanup(func() { cancel(); ctrl.Close(); c.Close() })
	return env, ctrl
}

// freeAddress returns a loopback address with a port nothing listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	return freeAddresses(t, 1)[0]
}

// freeAddresses returns n distinct loopback addresses nothing listens on. It
// holds every port open until all are chosen: ports picked one after another,
// each closed before the next, can come back the same (a CI run lost the
// plugin to its metrics server taking the CSI endpoint's port).
func freeAddresses(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}
