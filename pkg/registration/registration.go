// Package registration registers the node plugin with the kubelet itself,
// over the kubelet's plugin registration API (pluginregistration/v1), so the
// node DaemonSet can run as a single container without the
// node-driver-registrar sidecar.
//
// The kubelet watches its plugins_registry directory; when a socket appears
// there it asks the plugin who it is (GetInfo: a CSI plugin, its driver name,
// the CSI endpoint to dial) and then reports whether registration worked
// (NotifyRegistrationStatus). Removing the socket unregisters the plugin,
// which is what happens when the plugin stops. Users who prefer the sidecar
// keep registration off and run node-driver-registrar as before.
package registration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/diskplane/diskplane/pkg/driver"
)

// supportedVersions are the CSI versions the plugin speaks, as the kubelet
// expects them in GetInfo.
var supportedVersions = []string{"1.0.0"}

// defaultRetryDelay is how long the server waits, after the kubelet reports
// a failed registration, before it offers its socket again: a new socket is
// what makes the kubelet try again.
const defaultRetryDelay = 10 * time.Second

// SocketPath is where the registration socket of driverName goes in the
// registration directory dir.
func SocketPath(dir, driverName string) string {
	return filepath.Join(dir, driverName+"-reg.sock")
}

// Server answers the kubelet's registration calls for one CSI driver.
type Server struct {
	registerapi.UnimplementedRegistrationServer

	driverName string
	endpoint   string
	retryDelay time.Duration
	registered atomic.Bool
	failed     chan struct{}
}

// New returns the registration server of driverName, whose CSI socket the
// kubelet finds at csiEndpoint (a path on the host, e.g.
// /var/lib/kubelet/plugins/ebs.csi.diskplane.io/csi.sock: the kubelet dials
// it from outside the plugin's container).
func New(driverName, csiEndpoint string) *Server {
	return &Server{driverName: driverName, endpoint: csiEndpoint, retryDelay: defaultRetryDelay, failed: make(chan struct{}, 1)}
}

// Registered reports whether the kubelet has accepted the plugin, e.g. so a
// startup taint can be removed once volumes can be mounted on the node.
func (s *Server) Registered() bool { return s.registered.Load() }

// GetInfo tells the kubelet what this plugin is and where its CSI endpoint is.
func (s *Server) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	klog.V(2).InfoS("Kubelet asked for plugin info", "driver", s.driverName, "endpoint", s.endpoint)
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.driverName,
		Endpoint:          s.endpoint,
		SupportedVersions: supportedVersions,
	}, nil
}

// NotifyRegistrationStatus records the kubelet's verdict. A failure makes
// Run offer a fresh socket after a delay, so the kubelet tries again.
func (s *Server) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s.registered.Store(st.GetPluginRegistered())
	if st.GetPluginRegistered() {
		klog.InfoS("Registered with the kubelet", "driver", s.driverName)
	} else {
		klog.ErrorS(errors.New(st.GetError()), "Kubelet refused the plugin registration; offering the socket again later",
			"driver", s.driverName, "retryIn", s.retryDelay)
		select {
		case s.failed <- struct{}{}:
		default:
		}
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Run serves the registration socket at socketPath until ctx ends, then
// removes it, which unregisters the plugin. After a failed registration it
// takes the socket away and offers it again.
func (s *Server) Run(ctx context.Context, socketPath string) error {
	for {
		if err := s.serveOnce(ctx, socketPath); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.retryDelay):
		}
	}
}

// serveOnce serves the socket until ctx ends or the kubelet reports a
// failed registration.
func (s *Server) serveOnce(ctx context.Context, socketPath string) error {
	l, err := driver.Endpoint{Network: "unix", Address: socketPath}.Listen()
	if err != nil {
		return fmt.Errorf("registration socket: %w", err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, s)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	klog.InfoS("Serving kubelet plugin registration", "socket", socketPath, "driver", s.driverName, "csiEndpoint", s.endpoint)

	var serveErr error
	select {
	case <-ctx.Done():
	case <-s.failed:
	case serveErr = <-served:
	}
	s.registered.Store(false)
	stopGracefully(srv)
	if serveErr == nil {
		<-served
	}
	if err := os.Remove(socketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "Could not remove the registration socket", "socket", socketPath)
	}
	if serveErr != nil {
		return fmt.Errorf("registration server stopped: %w", serveErr)
	}
	return nil
}

// stopTimeout bounds how long a stopping server waits for calls in flight,
// such as the NotifyRegistrationStatus that reported the failure.
const stopTimeout = 5 * time.Second

func stopGracefully(srv *grpc.Server) {
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(stopTimeout):
		srv.Stop()
		<-stopped
	}
}
