package mounter

import (
	"context"
	"errors"

	"github.com/diskplane/diskplane/pkg/health"
)

// HealthChecker is a Mounter that can tell what is wrong with a volume on
// this node: its device gone, replaced, dead or counting I/O errors; its
// filesystem made read-only or shut down by the kernel after errors, or
// recording errors; its mount corrupted. It looks only at what the kernel
// already knows (the mount table, sysfs, stat of the mount point), never at
// the volume's data, so the kubelet can ask with every stats round. The
// Linux mounter is one; where a Mounter is not, the node service offers no
// volume health.
type HealthChecker interface {
	// VolumeHealth inspects volumeID where it is mounted at paths (a
	// publish or staging path; a mounted filesystem, or a device node
	// bind-mounted for a raw block volume) and the device behind them. When
	// no path shows it mounted (none given, or the mount is gone), it looks
	// the volume's device up by its ID, without waiting for one to appear,
	// and inspects that device and every filesystem mounted from it. It
	// fails with ErrNotOnNode when the volume is neither mounted nor
	// attached here.
	VolumeHealth(ctx context.Context, volumeID string, paths []string) (health.Report, error)
}

// ErrNotOnNode means a volume has no mount and no device on this node.
var ErrNotOnNode = errors.New("volume is neither mounted nor attached on this node")
