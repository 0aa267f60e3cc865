// Package controller is Diskplane's CSI Controller service: it turns the
// Kubernetes sidecars' requests (provision, attach, snapshot, expand,
// modify) into calls on the cloud.Cloud interface, checks every request
// before it touches the cloud, and answers with the gRPC codes the CSI spec
// names.
//
// The service keeps no state of its own beyond the operations running right
// now: idempotency comes from the cloud (volumes and snapshots are found by
// name, EC2 ClientTokens), so a restarted controller picks up where the last
// one stopped.
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/coalescer"
	"github.com/diskplane/diskplane/pkg/driver/parameters"
	"github.com/diskplane/diskplane/pkg/driver/volumehealth"
	"github.com/diskplane/diskplane/pkg/inflight"
)

// DefaultModifyCoalesceWindow is how long a ControllerExpandVolume or
// ControllerModifyVolume waits for the other one for the same volume, so
// both become one EC2 ModifyVolume. The resizer sends them back to back when
// a PVC's size and VolumeAttributesClass change together.
const DefaultModifyCoalesceWindow = 2 * time.Second

// defaultModifyTimeout bounds one coalesced modification (EC2 ModifyVolume
// and the wait until it is optimizing). It is longer than the resizer's RPC
// timeout on purpose: a caller that gives up does not cancel the
// modification the others are waiting for, and its retry finds it done.
const defaultModifyTimeout = 5 * time.Minute

// Options configure the Controller service.
type Options struct {
	// DriverName is the CSI driver name; it names the cluster tag.
	DriverName string
	// ExtraTags are added to every volume and snapshot (--extra-tags).
	ExtraTags map[string]string
	// ClusterID tags every volume and snapshot kubernetes.io/cluster/<id>=owned (--k8s-tag-cluster-id).
	ClusterID string
	// ModifyCoalesceWindow is --modify-volume-coalesce-window; zero means DefaultModifyCoalesceWindow.
	ModifyCoalesceWindow time.Duration
	// Keys wraps the LUKS keys of volumes whose StorageClass says
	// nodeEncryptionKeySource: kms; without it such classes are refused.
	Keys datakeys.Wrapper
	// SnapshotIntents records, before CreateSnapshot is sent for a
	// snapshot the external-snapshotter asked for, that this process may
	// send it, on the VolumeSnapshotContent the request names (package
	// snapshotintent). Without it, or for a request that names no content,
	// the first snapshot of a name within the cloud's visibility window of
	// this process's start waits that window out.
	SnapshotIntents SnapshotIntents
}

// SnapshotIntents hands out the record of which controller processes may
// have sent CreateSnapshot for a VolumeSnapshotContent's snapshot, kept
// where every process reads it with strong consistency.
type SnapshotIntents interface {
	For(content string) cloud.SnapshotIntent
}

// Service is the CSI Controller service. It also reports the plugin
// capabilities the controller provides and probes the cloud for Identity.
type Service struct {
	csi.UnimplementedControllerServer

	cloud      cloud.Cloud
	params     *parameters.Parser
	keys       datakeys.Wrapper
	intents    SnapshotIntents
	driverName string
	inFlight   inflight.Set
	modifier   *coalescer.Coalescer[string, modifyRequest, *modifyOutcome]
}

// New builds the Controller service over a cloud. Call Close when done.
func New(c cloud.Cloud, opts Options) (*Service, error) {
	if c == nil {
		return nil, errors.New("controller: a cloud is required")
	}
	params, err := parameters.NewParser(parameters.Config{
		DriverName: opts.DriverName, ClusterID: opts.ClusterID, ExtraTags: opts.ExtraTags,
	})
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	window := opts.ModifyCoalesceWindow
	if window == 0 {
		window = DefaultModifyCoalesceWindow
	}
	s := &Service{cloud: c, params: params, keys: opts.Keys, intents: opts.SnapshotIntents, driverName: opts.DriverName}
	s.modifier, err = coalescer.New(mergeModifyRequests, s.executeModify, coalescer.Options{
		Name: "ModifyVolume", Window: window, ExecTimeout: defaultModifyTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	klog.V(2).InfoS("Controller service ready", "driver", opts.DriverName, "modifyCoalesceWindow", window,
		"extraTags", len(opts.ExtraTags), "clusterID", opts.ClusterID, "snapshotIntents", opts.SnapshotIntents != nil)
	return s, nil
}

// Close stops the modification coalescer: pending expand/modify calls get
// Unavailable and no goroutine of the service outlives Close.
func (s *Service) Close() { s.modifier.Close() }

// controllerCapabilities is exactly what this service implements and tests.
var controllerCapabilities = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
	csi.ControllerServiceCapability_RPC_GET_VOLUME,
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
	csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	volumehealth.ControllerVolumeCondition,
	csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
	csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
}

// ControllerGetCapabilities lists the controller RPCs this service
// implements. GetCapacity is not among them (a cloud has no capacity to
// report) and PUBLISH_READONLY is not either (EBS cannot attach read-only).
func (s *Service) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	caps := make([]*csi.ControllerServiceCapability, 0, len(controllerCapabilities))
	for _, c := range controllerCapabilities {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: c},
		}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// PluginCapabilities adds what the controller brings to Identity's plugin
// capabilities: volumes live in one zone (topology), and they grow while
// attached (online expansion). It implements driver.CapabilityReporter.
func (s *Service) PluginCapabilities() []*csi.PluginCapability {
	return []*csi.PluginCapability{
		{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
			Type: csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS,
		}}},
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{
			Type: csi.PluginCapability_VolumeExpansion_ONLINE,
		}}},
	}
}

// Probe reports whether the cloud answers with valid credentials, so the
// liveness probe restarts a controller that lost them. It implements driver.Prober.
func (s *Service) Probe(ctx context.Context) error {
	if err := s.cloud.HealthCheck(ctx); err != nil {
		return fmt.Errorf("cloud API: %w", err)
	}
	return nil
}
