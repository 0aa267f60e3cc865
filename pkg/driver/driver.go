// Package driver assembles Diskplane's CSI plugin: it serves the Identity
// service and, as the mode says, the Controller and Node services on one gRPC
// endpoint, logs and measures every call, and stops gracefully.
//
// The services themselves live in their own packages and reach the cloud, the
// node's OS and the instance metadata only through interfaces, so this package
// is the single place that decides what runs in a process.
package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
)

// Mode selects which CSI services one plugin process serves.
type Mode string

// The plugin modes. Controller mode is the only one that builds cloud
// credentials; node mode must work on a node that has none.
const (
	ModeController Mode = "controller"
	ModeNode       Mode = "node"
	ModeAll        Mode = "all"
)

// ParseMode validates the --mode flag.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeController, ModeNode, ModeAll:
		return m, nil
	default:
		return "", fmt.Errorf("mode %q: want controller, node or all", s)
	}
}

// RunsController reports whether the mode serves the Controller service.
func (m Mode) RunsController() bool { return m == ModeController || m == ModeAll }

// RunsNode reports whether the mode serves the Node service.
func (m Mode) RunsNode() bool { return m == ModeNode || m == ModeAll }

// DefaultShutdownTimeout bounds how long in-flight RPCs may run after SIGTERM
// before the server cuts them off. It stays below the kubelet's default 30 s
// termination grace period so the socket is always removed.
const DefaultShutdownTimeout = 20 * time.Second

// handlerExitGrace is how long cancelled handlers get to return after the
// shutdown timeout before Run gives up on them.
const handlerExitGrace = 5 * time.Second

// Config is what a Driver serves.
type Config struct {
	// Name is the CSI driver name (e.g. ebs.csi.diskplane.io).
	Name string
	// Endpoint is where the gRPC server listens.
	Endpoint Endpoint
	// Controller is the Controller service, or nil when this process does not serve it.
	Controller csi.ControllerServer
	// Node is the Node service, or nil when this process does not serve it.
	Node csi.NodeServer
	// ShutdownTimeout bounds the graceful stop; zero means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
}

// Driver is one running CSI plugin.
type Driver struct {
	cfg      Config
	identity *IdentityService
	server   *grpc.Server
}

// New validates the configuration and builds the gRPC server.
func New(cfg Config) (*Driver, error) {
	if cfg.Name == "" {
		return nil, errors.New("driver name is required")
	}
	if cfg.Controller == nil && cfg.Node == nil {
		return nil, errors.New("a plugin must serve the controller service, the node service, or both")
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	d := &Driver{
		cfg:      cfg,
		identity: NewIdentityService(cfg.Name, cfg.Controller, cfg.Node),
		server:   grpc.NewServer(grpc.UnaryInterceptor(logAndMeasure)),
	}
	csi.RegisterIdentityServer(d.server, d.identity)
	if cfg.Controller != nil {
		csi.RegisterControllerServer(d.server, cfg.Controller)
	}
	if cfg.Node != nil {
		csi.RegisterNodeServer(d.server, cfg.Node)
	}
	return d, nil
}

// Identity returns the Identity service, so /healthz can call Probe in process.
func (d *Driver) Identity() *IdentityService { return d.identity }

// Run serves until ctx is cancelled, then stops gracefully: new RPCs are
// refused, in-flight ones may finish within the shutdown timeout, and the
// unix socket is removed so a restarted plugin finds a clean path.
func (d *Driver) Run(ctx context.Context) error {
	l, err := d.cfg.Endpoint.Listen()
	if err != nil {
		return err
	}
	defer d.removeSocket()
	klog.InfoS("Serving CSI", "driver", d.cfg.Name, "endpoint", d.cfg.Endpoint.String(),
		"controller", d.cfg.Controller != nil, "node", d.cfg.Node != nil)

	served := make(chan error, 1)
	go func() { served <- d.server.Serve(l) }()

	select {
	case err := <-served:
		return fmt.Errorf("gRPC server stopped: %w", err)
	case <-ctx.Done():
	}
	klog.InfoS("Stopping CSI server; letting in-flight requests finish", "timeout", d.cfg.ShutdownTimeout)
	stopped := make(chan struct{})
	go func() {
		d.server.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(d.cfg.ShutdownTimeout):
		klog.InfoS("Shutdown timeout passed; cancelling remaining requests")
		d.server.Stop()
		// Stop cancels every request's context; a handler that ignores its
		// context must not keep the process (and the socket) alive forever.
		select {
		case <-stopped:
		case <-time.After(handlerExitGrace):
			klog.InfoS("Some requests did not return after cancellation; exiting anyway")
		}
	}
	<-served
	return nil
}

func (d *Driver) removeSocket() {
	if d.cfg.Endpoint.Network != "unix" {
		return
	}
	if err := os.Remove(d.cfg.Endpoint.Address); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "Could not remove socket", "path", d.cfg.Endpoint.Address)
	}
}
