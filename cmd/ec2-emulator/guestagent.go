package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
	"github.com/diskplane/diskplane/pkg/emulator/guestagent"
)

// guestAgentCommand serves the guest agent, inside a VM that plays the
// emulator's instance (hack/vm).
const guestAgentCommand = "guest-agent"

// defaultGuestAgentListen is where the agent listens in the VM; the host
// reaches it through the VM's port forwarding.
const defaultGuestAgentListen = "0.0.0.0:8703"

// guestAgent runs, as root inside the VM, the agent that makes the volumes
// the emulator attaches to the VM appear as NVMe devices with EBS's serial
// numbers and model (the emulator's --guest-agent points at it). It serves
// until SIGTERM or SIGINT.
func guestAgent(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("ec2-emulator "+guestAgentCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("listen", defaultGuestAgentListen, "host:port the agent serves its HTTP API on")
	logFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(logFlags)
	fs.Var(logFlags.Lookup("v").Value, "v", "log verbosity: 2 logs every attach and detach")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	defer klog.Flush()
	target, err := disks.NewNVMeTarget()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "--listen %s: %v\n", *addr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv := &http.Server{Handler: guestagent.Handler(target), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	klog.InfoS("Serving the guest agent", "address", l.Addr().String())
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.ErrorS(err, "The guest agent stopped")
		return 1
	}
	return 0
}
