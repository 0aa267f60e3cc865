package csiproxy

import (
	"context"
	"fmt"
	"os"

	disk "github.com/kubernetes-csi/csi-proxy/v2/pkg/disk"
	diskapi "github.com/kubernetes-csi/csi-proxy/v2/pkg/disk/hostapi"
	fs "github.com/kubernetes-csi/csi-proxy/v2/pkg/filesystem"
	fsapi "github.com/kubernetes-csi/csi-proxy/v2/pkg/filesystem/hostapi"
	volume "github.com/kubernetes-csi/csi-proxy/v2/pkg/volume"
	volumeapi "github.com/kubernetes-csi/csi-proxy/v2/pkg/volume/hostapi"
	"k8s.io/klog/v2"
)

// HostAPIs are the host APIs the csi-proxy v2 library runs its operations
// on: Windows itself (PowerShell's storage cmdlets for disks and volumes,
// Go's os package for files) in a HostProcess container, or fakes in tests;
// and what reads the disks' bytes, which the library does not.
type HostAPIs struct {
	Disk       diskapi.HostAPI
	Volume     volumeapi.HostAPI
	Filesystem fsapi.HostAPI
	Raw        DiskReader
}

// WindowsHostAPIs are the library's host APIs over Windows itself.
func WindowsHostAPIs() HostAPIs {
	return HostAPIs{Disk: diskapi.New(), Volume: volumeapi.New(), Filesystem: fsapi.New(), Raw: physicalDrives{}}
}

// physicalDrives reads disks as \\.\PhysicalDriveN, which a HostProcess
// container running as SYSTEM may open for reading while the disk is in
// use (raw reads must start and end on sector boundaries).
type physicalDrives struct{}

func (physicalDrives) ReadDisk(disk uint32, offset int64, b []byte) error {
	f, err := os.Open(fmt.Sprintf(`\\.\PhysicalDrive%d`, disk))
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.ReadAt(b, offset); err != nil {
		return fmt.Errorf("read %d bytes at %d of disk %d: %w", len(b), offset, disk, err)
	}
	return nil
}

// libraryHost is Host over the csi-proxy v2 library, in this process.
type libraryHost struct {
	disk   disk.Interface
	volume volume.Interface
	fs     fs.Interface
	raw    DiskReader
}

// NewLibrary returns the Host of a plugin in a HostProcess container: the
// csi-proxy v2 library over apis. Like Connect it checks the host answers
// before it is used: the boot disk's state can be read. (Not the list of
// disks: that fails as a whole while any one disk cannot be opened, which
// must not keep the plugin from starting.) Over Windows' own APIs that is a
// run of PowerShell's Get-Disk, so a host whose PowerShell cannot answer
// (Wine's powershell.exe, a stub that prints nothing) is refused at the
// start rather than failing every stage later.
func NewLibrary(ctx context.Context, apis HostAPIs) (Host, error) {
	h, err := newLibraryHost(apis)
	if err != nil {
		return nil, err
	}
	if _, err := h.disk.GetDiskState(ctx, &disk.GetDiskStateRequest{DiskNumber: 0}); err != nil {
		return nil, fmt.Errorf("%w: the csi-proxy library cannot read the state of the host's boot disk "+
			"(is this a HostProcess container running as NT AUTHORITY\\SYSTEM, where Windows PowerShell's Get-Disk answers?): %v",
			ErrNotServed, err)
	}
	klog.V(2).InfoS("csi-proxy library ready in this process")
	return h, nil
}

// newLibraryHost puts the library's fronts over apis, without NewLibrary's
// check, so that a test can call every operation of a host that fails it.
func newLibraryHost(apis HostAPIs) (*libraryHost, error) {
	d, err := disk.New(apis.Disk)
	if err != nil {
		return nil, err
	}
	v, err := volume.New(apis.Volume)
	if err != nil {
		return nil, err
	}
	f, err := fs.New(apis.Filesystem)
	if err != nil {
		return nil, err
	}
	return &libraryHost{disk: d, volume: v, fs: f, raw: apis.Raw}, nil
}

func (h *libraryHost) Close() error { return nil }

// Check succeeds: the library runs in this process.
func (h *libraryHost) Check(context.Context) error { return nil }

func (h *libraryHost) ListDiskIDs(ctx context.Context) (map[uint32]DiskIDs, error) {
	resp, err := h.disk.ListDiskIDs(ctx, &disk.ListDiskIDsRequest{})
	if err != nil {
		return nil, err
	}
	out := make(map[uint32]DiskIDs, len(resp.DiskIDs))
	for n, ids := range resp.DiskIDs {
		out[n] = DiskIDs{SerialNumber: ids.SerialNumber, Page83: ids.Page83}
	}
	return out, nil
}

func (h *libraryHost) ReadDisk(_ context.Context, n uint32, offset int64, b []byte) error {
	if h.raw == nil {
		return fmt.Errorf("%w: no disk reader was given", ErrNoDiskAccess)
	}
	return h.raw.ReadDisk(n, offset, b)
}

func (h *libraryHost) Rescan(ctx context.Context) error {
	_, err := h.disk.Rescan(ctx, &disk.RescanRequest{})
	return err
}

func (h *libraryHost) DiskSize(ctx context.Context, n uint32) (int64, error) {
	resp, err := h.disk.GetDiskStats(ctx, &disk.GetDiskStatsRequest{DiskNumber: n})
	if err != nil {
		return 0, err
	}
	return resp.TotalBytes, nil
}

func (h *libraryHost) SetDiskOnline(ctx context.Context, n uint32, online bool) error {
	_, err := h.disk.SetDiskState(ctx, &disk.SetDiskStateRequest{DiskNumber: n, IsOnline: online})
	return err
}

func (h *libraryHost) PartitionDisk(ctx context.Context, n uint32) error {
	_, err := h.disk.PartitionDisk(ctx, &disk.PartitionDiskRequest{DiskNumber: n})
	return err
}

func (h *libraryHost) VolumesOnDisk(ctx context.Context, n uint32) ([]string, error) {
	resp, err := h.volume.ListVolumesOnDisk(ctx, &volume.ListVolumesOnDiskRequest{DiskNumber: n})
	if err != nil {
		return nil, err
	}
	return volumeIDs(resp.VolumeIDs), nil
}

func (h *libraryHost) IsVolumeFormatted(ctx context.Context, v string) (bool, error) {
	resp, err := h.volume.IsVolumeFormatted(ctx, &volume.IsVolumeFormattedRequest{VolumeID: v})
	if err != nil {
		return false, err
	}
	return resp.Formatted, nil
}

func (h *libraryHost) FormatVolume(ctx context.Context, v string) error {
	_, err := h.volume.FormatVolume(ctx, &volume.FormatVolumeRequest{VolumeID: v})
	return err
}

func (h *libraryHost) MountVolume(ctx context.Context, v, path string) error {
	_, err := h.volume.MountVolume(ctx, &volume.MountVolumeRequest{VolumeID: v, TargetPath: path})
	return err
}

func (h *libraryHost) UnmountVolume(ctx context.Context, v, path string) error {
	_, err := h.volume.UnmountVolume(ctx, &volume.UnmountVolumeRequest{VolumeID: v, TargetPath: path})
	return err
}

func (h *libraryHost) ResizeVolume(ctx context.Context, v string) error {
	_, err := h.volume.ResizeVolume(ctx, &volume.ResizeVolumeRequest{VolumeID: v})
	return err
}

func (h *libraryHost) VolumeStats(ctx context.Context, v string) (int64, int64, error) {
	resp, err := h.volume.GetVolumeStats(ctx, &volume.GetVolumeStatsRequest{VolumeID: v})
	if err != nil {
		return 0, 0, err
	}
	return resp.TotalBytes, resp.UsedBytes, nil
}

func (h *libraryHost) DiskOfVolume(ctx context.Context, v string) (uint32, error) {
	resp, err := h.volume.GetDiskNumberFromVolumeID(ctx, &volume.GetDiskNumberFromVolumeIDRequest{VolumeID: v})
	if err != nil {
		return 0, err
	}
	return resp.DiskNumber, nil
}

func (h *libraryHost) VolumeAt(ctx context.Context, path string) (string, error) {
	resp, err := h.volume.GetVolumeIDFromTargetPath(ctx, &volume.GetVolumeIDFromTargetPathRequest{TargetPath: path})
	if err != nil {
		return "", err
	}
	return resp.VolumeID, nil
}

func (h *libraryHost) PathExists(ctx context.Context, path string) (bool, error) {
	resp, err := h.fs.PathExists(ctx, &fs.PathExistsRequest{Path: path})
	if err != nil {
		return false, err
	}
	return resp.Exists, nil
}

func (h *libraryHost) Mkdir(ctx context.Context, path string) error {
	_, err := h.fs.Mkdir(ctx, &fs.MkdirRequest{Path: path})
	return err
}

func (h *libraryHost) Rmdir(ctx context.Context, path string) error {
	_, err := h.fs.Rmdir(ctx, &fs.RmdirRequest{Path: path})
	return err
}

func (h *libraryHost) CreateSymlink(ctx context.Context, source, target string) error {
	_, err := h.fs.CreateSymlink(ctx, &fs.CreateSymlinkRequest{SourcePath: source, TargetPath: target})
	return err
}

func (h *libraryHost) IsSymlink(ctx context.Context, path string) (bool, error) {
	resp, err := h.fs.IsSymlink(ctx, &fs.IsSymlinkRequest{Path: path})
	if err != nil {
		return false, err
	}
	return resp.IsSymlink, nil
}
