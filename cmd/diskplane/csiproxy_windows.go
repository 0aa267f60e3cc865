package main

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/csiproxy"
)

// connectCSIProxy reaches the host the way the node is deployed: the
// csi-proxy v2 library in this process for a HostProcess pod
// (--windows-host-process), else csi-proxy's named pipes, checking that it
// serves the API versions Diskplane needs and refusing to start otherwise.
func connectCSIProxy(ctx context.Context, f *nodeFlags) (csiproxy.Host, error) {
	if f.windowsHostProcess {
		klog.InfoS("Using the csi-proxy library in this process (HostProcess pod)")
		return csiproxy.NewLibrary(ctx, csiproxy.WindowsHostAPIs())
	}
	klog.InfoS("Connecting to csi-proxy", "pipes", csiproxy.PipePath("", "<group>", "<version>"))
	return csiproxy.Connect(ctx, csiproxy.PipeOptions{Wait: f.csiProxyWait})
}

func closeHost(h csiproxy.Host) error { return h.Close() }
