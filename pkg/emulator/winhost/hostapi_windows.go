package winhost

import (
	diskapi "github.com/kubernetes-csi/csi-proxy/v2/pkg/disk/hostapi"

	"github.com/diskplane/diskplane/pkg/csiproxy"
)

// HostAPIs are this host as the csi-proxy v2 library's host APIs, for a
// node plugin in HostProcess mode that runs the library in-process over an
// emulated host instead of Windows' own (which has no disks under Wine).
func (h *Host) HostAPIs() csiproxy.HostAPIs {
	return csiproxy.HostAPIs{Disk: diskHostAPI{h}, Volume: h, Filesystem: h, Raw: h}
}

// diskHostAPI converts the two disk answers whose types are the library's.
type diskHostAPI struct{ *Host }

var _ diskapi.HostAPI = diskHostAPI{}

func (d diskHostAPI) ListDiskLocations() (map[uint32]diskapi.DiskLocation, error) {
	locations, err := d.Host.ListDiskLocations()
	out := make(map[uint32]diskapi.DiskLocation, len(locations))
	for n, l := range locations {
		out[n] = diskapi.DiskLocation{Adapter: l.Adapter, Bus: l.Bus, Target: l.Target, LUNID: l.LUNID}
	}
	return out, err
}

func (d diskHostAPI) ListDiskIDs() (map[uint32]diskapi.DiskIDs, error) {
	ids, err := d.Host.ListDiskIDs()
	out := make(map[uint32]diskapi.DiskIDs, len(ids))
	for n, id := range ids {
		out[n] = diskapi.DiskIDs{Page83: id.Page83, SerialNumber: id.SerialNumber}
	}
	return out, err
}
