// Package node is Diskplane's CSI Node service: it turns an EBS volume that
// the controller attached to this instance into a mounted filesystem (or a
// raw block device) inside a pod, grows it when the volume grows, and
// reports its usage and the node's identity and attachment limit.
//
// It is the code that must never lose data, so every step that writes looks
// first: a device is used only after the kernel shows it is the requested
// volume, formatted only when it holds nothing, and every RPC checks what is
// already mounted before it acts, which also makes each of them idempotent.
// The service reaches the OS only through mounter.Mounter and needs no cloud
// credentials.
//
// NodeStageVolume, NodePublishVolume and NodeExpandVolume parse their
// request once, at the edge (request.go: the capability, the volume
// context's encryption, key and filesystem, the secrets' passphrase, the
// publish context's device name), refusing bad input there before any
// work; the steps after it decide from that value and never read the
// request's maps again.
package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/cloud/limits"
	"github.com/diskplane/diskplane/pkg/cloud/metadata"
	"github.com/diskplane/diskplane/pkg/inflight"
	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/pkg/podevents"
	"github.com/diskplane/diskplane/pkg/tokenplace"
)

// Topology keys the node reports. The zone key is the one volumes carry, so
// the scheduler places pods where their volumes are; the OS key lets a
// StorageClass or the scheduler keep Linux volumes off Windows nodes. The
// zone ID key (topology.k8s.aws/zone-id) is deliberately not a node key: it
// is accepted only when provisioning.
const (
	ZoneTopologyKey = "topology.kubernetes.io/zone"
	OSTopologyKey   = "kubernetes.io/os"
)

// Config is what a node service is built from.
type Config struct {
	// Metadata tells the service who this node is (usually metadata.Get). It
	// is asked when the identity is first needed and again after a failure;
	// the first complete answer is kept. Only NodeGetInfo needs it, so a
	// metadata service that is slow to answer at boot delays the node's
	// registration, not its start.
	Metadata func(ctx context.Context) (*metadata.Instance, error)
	// Mounter is the node's OS.
	Mounter mounter.Mounter
	// VolumeAttachLimit, when positive, is reported as MaxVolumesPerNode as
	// it is, overriding everything the node would compute.
	VolumeAttachLimit int
	// ReservedVolumeAttachments, when zero or more, is the number of
	// attachment slots taken by volumes the driver does not manage (root
	// volume included), replacing the count from the instance's block device
	// mappings. Negative means count them.
	ReservedVolumeAttachments int
	// Unwrapper unwraps the keys of volumes whose key KMS wraps with each
	// publishing pod's own identity; without it such volumes are refused.
	Unwrapper datakeys.Unwrapper
	// TokenAudience is the audience of the pod token exchanged at STS;
	// empty means DefaultTokenAudience.
	TokenAudience string
	// TokenPlace tells where the kubelet puts pods' tokens (the driver's
	// CSIDriver object says); nil means the volume context, Kubernetes'
	// default.
	TokenPlace TokenPlacer
	// Events records warnings on pods (a pod's access to its volume's key
	// revoked); nil records none.
	Events PodEventer
	// Registerer receives the node's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// TokenPlacer tells where the kubelet puts a pod's service-account tokens
// in NodePublishVolume: the node takes them from there only, since the
// other field is filled from objects others may write.
type TokenPlacer interface {
	// TokensInSecrets reports whether the tokens are in the request's
	// secrets (else in its volume context); an error means the place cannot
	// be told now.
	TokensInSecrets(ctx context.Context) (bool, error)
}

// PodEventer records warnings on pods through the Kubernetes API
// (podevents.Recorder), for what a pod's owner must see beside the
// kubelet's own events.
type PodEventer interface {
	// Warn records a Warning event with reason and message on the pod.
	Warn(pod podevents.Pod, reason, message string)
}

// Service is the CSI Node service.
type Service struct {
	csi.UnimplementedNodeServer

	os       mounter.Mounter
	platform mounter.Platform
	metadata func(ctx context.Context) (*metadata.Instance, error)
	attach   int
	reserved int
	inFlight inflight.Set

	unwrapper  datakeys.Unwrapper
	audience   string
	tokenPlace TokenPlacer
	events     PodEventer
	unlocks    *unlocks
	metrics    *unlockMetrics

	mu       sync.Mutex
	instance *metadata.Instance // nil until Metadata answered
}

// New checks the configuration and returns the node service.
func New(cfg Config) (*Service, error) {
	if cfg.Mounter == nil {
		return nil, errors.New("node service needs a mounter")
	}
	if cfg.Metadata == nil {
		return nil, errors.New("node service needs a metadata source")
	}
	metrics, err := newUnlockMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("node metrics: %w", err)
	}
	audience := cfg.TokenAudience
	if audience == "" {
		audience = DefaultTokenAudience
	}
	tokenPlace := cfg.TokenPlace
	if tokenPlace == nil {
		tokenPlace = tokenplace.Fixed(false) // the kubelet's default
	}
	return &Service{
		os:         cfg.Mounter,
		platform:   cfg.Mounter.Platform(),
		metadata:   cfg.Metadata,
		attach:     cfg.VolumeAttachLimit,
		reserved:   cfg.ReservedVolumeAttachments,
		unwrapper:  cfg.Unwrapper,
		audience:   audience,
		tokenPlace: tokenPlace,
		events:     cfg.Events,
		unlocks:    newUnlocks(),
		metrics:    metrics,
	}, nil
}

// Instance returns who this node is, asking the metadata source when it
// has not answered yet. Concurrent callers wait for one question rather
// than each asking.
func (s *Service) Instance(ctx context.Context) (metadata.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.instance != nil {
		return *s.instance, nil
	}
	in, err := s.metadata(ctx)
	if err != nil {
		return metadata.Instance{}, err
	}
	switch {
	case in == nil || in.ID == "":
		return metadata.Instance{}, errors.New("node metadata has no instance ID (the CSI node ID)")
	case in.Zone == "":
		return metadata.Instance{}, fmt.Errorf("node metadata of %s has no availability zone", in.ID)
	}
	s.instance = in
	klog.V(2).InfoS("Node identity known", "instanceID", in.ID, "instanceType", in.Type, "zone", in.Zone)
	return *in, nil
}

// nodeCapabilities are the node RPCs this service implements on every
// operating system.
var nodeCapabilities = []csi.NodeServiceCapability_RPC_Type{
	csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
	csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
}

// Probe reports whether the node can serve: on a node whose host side can
// stop answering (csi-proxy on Windows), whether it answers now. The
// Identity service's Probe, and so /healthz, ask it.
func (s *Service) Probe(ctx context.Context) error {
	if c, ok := s.os.(mounter.HostChecker); ok {
		return c.CheckHost(ctx)
	}
	return nil
}

// NodeGetCapabilities lists the optional node RPCs this service implements.
// SINGLE_NODE_MULTI_WRITER (the single- and multi-writer access modes) is
// offered only where the OS can list a volume's publications: without it,
// the kubelet sends SINGLE_NODE_WRITER and enforces ReadWriteOncePod itself.
func (s *Service) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	rpcs := nodeCapabilities
	if s.platform.PublicationRefs {
		rpcs = append(rpcs[:len(rpcs):len(rpcs)], csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER)
	}
	caps := make([]*csi.NodeServiceCapability, 0, len(rpcs))
	for _, c := range rpcs {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: c}}})
	}
	caps = append(caps, s.healthCapabilities()...)
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// PluginCapabilities tells Identity that this plugin reports topology, so
// the provisioner creates volumes in the zone of the pod's node.
func (s *Service) PluginCapabilities() []*csi.PluginCapability {
	return []*csi.PluginCapability{{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
		Type: csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS,
	}}}}
}

// NodeGetInfo names the node by its instance ID, places it in its zone and
// says how many more volumes can be attached to it.
func (s *Service) NodeGetInfo(ctx context.Context, _ *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	in, err := s.Instance(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "node metadata is not available yet: %v", err)
	}
	return &csi.NodeGetInfoResponse{
		NodeId:            in.ID,
		MaxVolumesPerNode: int64(s.maxVolumes(in)),
		AccessibleTopology: &csi.Topology{Segments: map[string]string{
			ZoneTopologyKey: in.Zone,
			OSTopologyKey:   s.platform.OS,
		}},
	}, nil
}

// maxVolumes is the instance type's attachment limit less the slots the
// instance already uses for other things, unless the operator set it.
func (s *Service) maxVolumes(in metadata.Instance) int {
	if s.attach > 0 {
		return s.attach
	}
	limit := limits.ForInstanceType(in.Type)
	usage := limits.Usage{
		Volumes:           s.reserved,
		NetworkInterfaces: in.NetworkInterfaces,
	}
	if usage.Volumes < 0 {
		usage.Volumes = 1 + countMappings(in.BlockDeviceMappings, "ebs") // the root volume and launch-time EBS volumes
	}
	ephemeral := countMappings(in.BlockDeviceMappings, "ephemeral")
	nvme, err := s.os.InstanceStoreVolumes()
	switch {
	case errors.Is(err, mounter.ErrUnsupported):
		// Windows: only the block device mappings count them.
		klog.V(2).InfoS("This OS cannot count NVMe instance store volumes; counting the block device mappings' only", "reason", err)
	case err != nil:
		// Counting nothing errs high by at most the instance store volumes of
		// the type; refusing to report a limit would keep the node unusable.
		klog.ErrorS(err, "Could not count NVMe instance store volumes; assuming none")
	}
	usage.InstanceStoreVolumes = max(ephemeral, nvme)
	n := limit.Available(usage)
	klog.V(2).InfoS("Computed attachment limit", "instanceType", in.Type, "slots", limit.Slots,
		"kind", limit.Kind, "volumesInUse", usage.Volumes, "networkInterfaces", usage.NetworkInterfaces,
		"instanceStoreVolumes", usage.InstanceStoreVolumes, "maxVolumesPerNode", n)
	return n
}

// countMappings counts the block device mappings whose name starts with
// prefix: "ebs1", "ebs2", … are EBS volumes attached at launch, "ephemeral0",
// … instance store volumes.
func countMappings(mappings map[string]string, prefix string) int {
	n := 0
	for name := range mappings {
		if strings.HasPrefix(name, prefix) {
			n++
		}
	}
	return n
}
