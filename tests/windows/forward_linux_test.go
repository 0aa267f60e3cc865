//go:build linux && wine

package windows

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// nodeForwarder is a Node service that passes every call to the node plugin
// under test. csi-sanity asks the Identity service of its node endpoint
// whether the plugin has a controller, even when the controller has an
// endpoint of its own; so the test serves Identity for the pair (the
// controller here and the Windows node there) on one socket, and the node's
// calls go through unchanged to diskplane.exe.
type nodeForwarder struct {
	csi.UnimplementedNodeServer
	client csi.NodeClient
	// capabilities are the node plugin's own plugin capabilities.
	capabilities []*csi.PluginCapability
}

// newNodeForwarder returns a forwarder to client, with the plugin
// capabilities the plugin reports itself.
func newNodeForwarder(ctx context.Context, client csi.NodeClient, identity csi.IdentityClient) (*nodeForwarder, error) {
	caps, err := identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		return nil, err
	}
	return &nodeForwarder{client: client, capabilities: caps.GetCapabilities()}, nil
}

// PluginCapabilities reports what the node plugin reports.
func (f *nodeForwarder) PluginCapabilities() []*csi.PluginCapability { return f.capabilities }

func (f *nodeForwarder) NodeStageVolume(ctx context.Context, r *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	return f.client.NodeStageVolume(ctx, r)
}

func (f *nodeForwarder) NodeUnstageVolume(ctx context.Context, r *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	return f.client.NodeUnstageVolume(ctx, r)
}

func (f *nodeForwarder) NodePublishVolume(ctx context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	return f.client.NodePublishVolume(ctx, r)
}

func (f *nodeForwarder) NodeUnpublishVolume(ctx context.Context, r *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	return f.client.NodeUnpublishVolume(ctx, r)
}

func (f *nodeForwarder) NodeGetVolumeStats(ctx context.Context, r *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	return f.client.NodeGetVolumeStats(ctx, r)
}

func (f *nodeForwarder) NodeExpandVolume(ctx context.Context, r *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	return f.client.NodeExpandVolume(ctx, r)
}

func (f *nodeForwarder) NodeGetCapabilities(ctx context.Context, r *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return f.client.NodeGetCapabilities(ctx, r)
}

func (f *nodeForwarder) NodeGetInfo(ctx context.Context, r *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return f.client.NodeGetInfo(ctx, r)
}
