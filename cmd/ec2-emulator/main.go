// Command ec2-emulator is a local EC2 for development, tests and demos. It
// answers the EC2 Query API (the volume, snapshot, instance and zone actions
// an EBS CSI driver uses) with EC2's behaviour and error codes, serves the
// instance metadata of the instance this host plays, and backs every volume
// with a sparse file that becomes a loop device, with the by-id link a Nitro
// instance would have, when it is attached to this host. Faults (latency,
// throttling, errors, eventual consistency, stuck attachments) are set by
// flags and changed at run time through the admin listener. See
// docs/emulator.md.
//
//	ec2-emulator [flags]                     serve
//	ec2-emulator describe-volumes [flags]    print the running emulator's volumes
//	ec2-emulator release-devices [flags]     remove a stopped emulator's loop devices and links
//	ec2-emulator guest-agent [flags]         inside a VM that plays the instance: expose attached volumes as NVMe
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator"
	"github.com/diskplane/diskplane/pkg/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case describeVolumesCommand:
			return describeVolumes(args[1:], stdout, stderr)
		case releaseDevicesCommand:
			return releaseDevices(args[1:], stdout, stderr)
		case guestAgentCommand:
			return guestAgent(args[1:], stderr)
		}
	}
	fs := flag.NewFlagSet("ec2-emulator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := registerFlags(fs)
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %v\n", fs.Args())
		return 2
	}
	if opts.showVersion {
		fmt.Fprintln(stdout, version.Get().String())
		return 0
	}
	defer klog.Flush()
	cfg, err := opts.config()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, cfg, opts, nil); err != nil {
		klog.ErrorS(err, "The EC2 emulator stopped with an error")
		return 1
	}
	klog.InfoS("The EC2 emulator stopped")
	return 0
}

// serve listens, starts the emulator and answers until ctx ends. When ready
// is not nil it receives the listeners once they are bound (tests listen on
// port 0).
func serve(ctx context.Context, cfg emulator.Config, opts *options, ready chan<- emulator.Listeners) error {
	klog.InfoS("Starting the EC2 emulator", "version", version.Get().String(), "region", cfg.Cloud.Region,
		"dataDir", cfg.Cloud.DataDir, "devices", cfg.Devices, "linkDir", cfg.LinkDir)
	var ls emulator.Listeners
	var err error
	closeAll := func() {
		for _, l := range []net.Listener{ls.EC2, ls.IMDS, ls.Admin} {
			if l != nil {
				_ = l.Close()
			}
		}
	}
	if ls.EC2, err = listen(opts.listen, "--listen"); err != nil {
		return err
	}
	if ls.IMDS, err = listen(opts.imdsListen, "--imds-listen"); err != nil {
		closeAll()
		return err
	}
	if ls.Admin, err = listen(opts.adminListen, "--admin-listen"); err != nil {
		closeAll()
		return err
	}
	e, err := emulator.New(cfg)
	if err != nil {
		closeAll()
		return err
	}
	defer func() {
		if err := e.Close(); err != nil {
			klog.ErrorS(err, "Stopping the emulated cloud failed")
		}
	}()
	if ready != nil {
		ready <- ls
	}
	return e.Serve(ctx, ls)
}

// listen binds addr; an empty address turns the listener off.
func listen(addr, flagName string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flagName, addr, err)
	}
	return l, nil
}
