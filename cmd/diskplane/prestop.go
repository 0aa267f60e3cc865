package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud/metadata"
	"github.com/diskplane/diskplane/pkg/drain"
)

// preStopCommand is the node plugin's preStop hook (pkg/drain).
const preStopCommand = "pre-stop"

// preStopFlags are the flags of diskplane pre-stop.
type preStopFlags struct {
	driverName   string
	logTo        string
	pollInterval time.Duration
}

func registerPreStopFlags(fs *flag.FlagSet) *preStopFlags {
	f := &preStopFlags{}
	fs.StringVar(&f.driverName, "driver-name", DefaultDriverName, "CSI driver name: whose VolumeAttachments to wait for")
	fs.StringVar(&f.logTo, "log-to", "", "file the hook appends its log lines to, e.g. /proc/1/fd/2 (the standard error of the "+
		"container's plugin process, whose log is kept; a hook's own output is not); empty: standard error")
	fs.DurationVar(&f.pollInterval, "poll-interval", drain.DefaultPollInterval, "how often to look at the node and its VolumeAttachments")
	logFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(logFlags)
	fs.Var(logFlags.Lookup("v").Value, "v", "log verbosity")
	return f
}

// preStop runs the node plugin's preStop hook: when the node
// (CSI_NODE_NAME) is being drained, deleted or shut down, it returns only
// once every VolumeAttachment of the driver on the node is gone, so that
// the plugin outlives the unmounts and detaches of the node's volumes;
// otherwise at once. The kubelet bounds it by the pod's
// terminationGracePeriodSeconds.
func preStop(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("diskplane "+preStopCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := registerPreStopFlags(fs)
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
	if f.logTo != "" {
		out, err := os.OpenFile(f.logTo, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			fmt.Fprintf(stderr, "--log-to %s: %v\n", f.logTo, err)
			return 2
		}
		defer out.Close()
		klog.LogToStderr(false)
		klog.SetOutput(out)
	}
	defer klog.Flush()
	nodeName := os.Getenv(metadata.NodeNameEnv)
	if nodeName == "" {
		klog.ErrorS(nil, "The preStop hook needs the node's name in "+metadata.NodeNameEnv)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := drain.Wait(ctx, drain.Config{
		NodeName: nodeName, DriverName: f.driverName, PollInterval: f.pollInterval,
	})
	if err != nil {
		klog.ErrorS(err, "The preStop hook ends without the node's volumes detached", "node", nodeName)
		return 1
	}
	return 0
}
