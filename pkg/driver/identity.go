package driver

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/diskplane/diskplane/pkg/version"
)

// CapabilityReporter is implemented by a controller or node service that adds
// plugin-level capabilities (topology, online expansion) to what Identity
// advertises. Each service declares what it can do, so Identity never
// advertises a feature whose service is not running in this mode.
type CapabilityReporter interface {
	PluginCapabilities() []*csi.PluginCapability
}

// Prober is implemented by a service whose health Probe should check, for
// example the controller's reachability of the cloud API. It must be cheap:
// the kubelet's liveness probe calls it every few seconds.
type Prober interface {
	Probe(ctx context.Context) error
}

// IdentityService answers the CSI Identity RPCs for whichever services this
// plugin process runs.
type IdentityService struct {
	csi.UnimplementedIdentityServer

	name          string
	hasController bool
	services      []any
}

// NewIdentityService returns the Identity service for a plugin named name
// that runs the given controller and/or node service (nil when absent).
func NewIdentityService(name string, controller csi.ControllerServer, node csi.NodeServer) *IdentityService {
	s := &IdentityService{name: name, hasController: controller != nil}
	if controller != nil {
		s.services = append(s.services, controller)
	}
	if node != nil {
		s.services = append(s.services, node)
	}
	return s
}

// GetPluginInfo names the driver and the running build.
func (s *IdentityService) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: s.name, VendorVersion: version.Version()}, nil
}

// GetPluginCapabilities reports CONTROLLER_SERVICE when a controller service
// runs here, plus whatever the running services report themselves.
func (s *IdentityService) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var caps []*csi.PluginCapability
	seen := map[string]bool{}
	add := func(c *csi.PluginCapability) {
		if key := c.String(); !seen[key] {
			seen[key] = true
			caps = append(caps, c)
		}
	}
	if s.hasController {
		add(&csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
			Type: csi.PluginCapability_Service_CONTROLLER_SERVICE,
		}}})
	}
	for _, svc := range s.services {
		if r, ok := svc.(CapabilityReporter); ok {
			for _, c := range r.PluginCapabilities() {
				add(c)
			}
		}
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe reports ready when every running service that can check its own
// health says it is healthy; otherwise FailedPrecondition names the problem,
// which is what the livenessprobe sidecar and /healthz surface.
func (s *IdentityService) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	for _, svc := range s.services {
		if p, ok := svc.(Prober); ok {
			if err := p.Probe(ctx); err != nil {
				return nil, status.Error(codes.FailedPrecondition, fmt.Sprintf("not ready: %v", err))
			}
		}
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
