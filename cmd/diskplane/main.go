// Command diskplane is the Diskplane CSI plugin. One binary serves the
// controller (a Deployment with cloud credentials and the CSI sidecars), the
// node plugin (a DaemonSet, no cloud credentials) or both, as --mode says.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/driver"
	"github.com/diskplane/diskplane/pkg/metrics"
	"github.com/diskplane/diskplane/pkg/version"
)

// DefaultDriverName is the CSI driver name Diskplane registers unless
// --driver-name says otherwise (ebs.csi.aws.com takes over volumes of the
// upstream AWS driver and of in-tree migration).
const DefaultDriverName = "ebs.csi.diskplane.io"

// options holds every flag of the binary.
type options struct {
	mode         string
	endpoint     string
	driverName   string
	httpEndpoint string
	showVersion  bool
	kubeconfig   string
	controller   controllerFlags
	node         nodeFlags
}

func registerFlags(fs *flag.FlagSet) *options {
	o := &options{}
	fs.StringVar(&o.mode, "mode", string(driver.ModeAll), "which CSI services to serve: controller, node or all")
	fs.StringVar(&o.endpoint, "endpoint", defaultEndpoint, "CSI endpoint: unix:///path/to/socket (unix://C:/path/to/socket on Windows) or tcp://host:port")
	fs.StringVar(&o.driverName, "driver-name", DefaultDriverName, "CSI driver name; ebs.csi.aws.com takes over volumes provisioned by the upstream AWS EBS driver")
	fs.StringVar(&o.httpEndpoint, "http-endpoint", "", "host:port serving /metrics and /healthz; empty disables it")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "",
		"kubeconfig of the Kubernetes API, for a plugin run outside a pod: the node reads its CSIDriver and records events on pods through it, "+
			"the controller records its snapshot intents there; empty: the pod's service account")
	o.controller.register(fs)
	o.node.register(fs)
	klog.InitFlags(fs)
	return o
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == preStopCommand {
		return preStop(args[1:], os.Stderr)
	}
	fs := flag.NewFlagSet("diskplane", flag.ContinueOnError)
	opts := registerFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %v\n", fs.Args())
		return 2
	}
	if opts.showVersion {
		fmt.Println(version.Get().String())
		return 0
	}
	defer klog.Flush()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, opts); err != nil {
		klog.ErrorS(err, "Diskplane stopped with an error")
		return 1
	}
	klog.InfoS("Diskplane stopped")
	return 0
}

func serve(ctx context.Context, opts *options) error {
	mode, err := driver.ParseMode(opts.mode)
	if err != nil {
		return err
	}
	endpoint, err := driver.ParseEndpoint(opts.endpoint)
	if err != nil {
		return err
	}
	klog.InfoS("Starting Diskplane", "version", version.Get().String(), "mode", mode, "driver", opts.driverName)

	registry := metrics.NewRegistry()
	if err := driver.RegisterMetrics(registry); err != nil {
		return err
	}

	// Everything started below stops when Run returns; cleanups wait for it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cleanups []func()
	defer func() {
		cancel()
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()

	var controller csi.ControllerServer
	if mode.RunsController() {
		svc, cleanup, err := buildController(ctx, opts, registry)
		if err != nil {
			return fmt.Errorf("controller service: %w", err)
		}
		controller, cleanups = svc, append(cleanups, cleanup)
	}
	var node csi.NodeServer
	if mode.RunsNode() {
		svc, cleanup, err := buildNode(ctx, opts, registry)
		if err != nil {
			return fmt.Errorf("node service: %w", err)
		}
		node, cleanups = svc, append(cleanups, cleanup)
	}
	d, err := driver.New(driver.Config{Name: opts.driverName, Endpoint: endpoint, Controller: controller, Node: node})
	if err != nil {
		return err
	}

	httpDone := make(chan error, 1)
	if opts.httpEndpoint != "" {
		probe := func(ctx context.Context) error {
			_, err := d.Identity().Probe(ctx, &csi.ProbeRequest{})
			return err
		}
		go func() { httpDone <- metrics.Serve(ctx, opts.httpEndpoint, registry, probe) }()
	} else {
		httpDone <- nil
	}
	runErr := d.Run(ctx)
	cancel()
	return errors.Join(runErr, <-httpDone)
}
