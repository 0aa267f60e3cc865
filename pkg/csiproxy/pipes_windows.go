package csiproxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	diskapi "github.com/kubernetes-csi/csi-proxy/client/api/disk/v1"
	fsapi "github.com/kubernetes-csi/csi-proxy/client/api/filesystem/v1"
	volumeapi "github.com/kubernetes-csi/csi-proxy/client/api/volume/v1"
	volumev2alpha1api "github.com/kubernetes-csi/csi-proxy/client/api/volume/v2alpha1"
	diskclient "github.com/kubernetes-csi/csi-proxy/client/groups/disk/v1"
	fsclient "github.com/kubernetes-csi/csi-proxy/client/groups/filesystem/v1"
	volumeclient "github.com/kubernetes-csi/csi-proxy/client/groups/volume/v1"
	volumev2alpha1client "github.com/kubernetes-csi/csi-proxy/client/groups/volume/v2alpha1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// DefaultPipePrefix is the prefix of csi-proxy's pipe names.
const DefaultPipePrefix = "csi-proxy"

// PipeOptions tell Connect where csi-proxy is.
type PipeOptions struct {
	// Prefix of the pipe names: \\.\pipe\<Prefix>-<group>-v1. Empty means
	// csi-proxy's own, DefaultPipePrefix; tests use their own.
	Prefix string
	// Wait bounds how long Connect waits for csi-proxy to serve every API
	// group (it may start after the plugin); zero means
	// DefaultConnectWait.
	Wait time.Duration
}

// DefaultConnectWait is how long Connect waits for csi-proxy by default.
const DefaultConnectWait = 30 * time.Second

// The API groups Diskplane needs, all at version v1 (csi-proxy v1.0.0 and
// later serve them), and the one that dates csi-proxy: v1.1.0 added the
// volume group at v2alpha1, which Diskplane asks for only to tell an older
// csi-proxy at start.
const (
	groupDisk       = "disk"
	groupVolume     = "volume"
	groupFilesystem = "filesystem"
	apiVersion      = "v1"
	datingVersion   = "v2alpha1"
)

// PipePath is the pipe of an API group at a version under prefix, spelt
// exactly as csi-proxy and its client spell it (client.PipePath, with its
// doubled backslashes after the dot), so the names are the same strings on
// both ends.
func PipePath(prefix, group, version string) string {
	if prefix == "" {
		prefix = DefaultPipePrefix
	}
	return `\\.\\pipe\\` + prefix + "-" + group + "-" + version
}

// pipeHost is Host over csi-proxy's named pipes.
type pipeHost struct {
	prefix string
	disk   *diskclient.Client
	volume *volumeclient.Client
	fs     *fsclient.Client
}

// Connect connects to csi-proxy and checks, as the KEP asks of a plugin at
// start, that it serves every API group version Diskplane needs: each pipe
// exists and answers a call. It waits for csi-proxy up to opts.Wait and
// then fails with ErrNotServed and a message that says what is missing.
func Connect(ctx context.Context, opts PipeOptions) (Host, error) {
	wait := opts.Wait
	if wait <= 0 {
		wait = DefaultConnectWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		h, err := connectOnce(ctx, opts.Prefix)
		if err == nil {
			return h, nil
		}
		klog.V(2).InfoS("csi-proxy is not ready", "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v (waited %s; Diskplane needs csi-proxy %s or later running on the node with the API groups disk, volume and filesystem at v1 and volume at v2alpha1 and their pipes mounted into the plugin's container, or --windows-host-process in a HostProcess pod)",
				ErrNotServed, err, wait, MinVersion)
		case <-time.After(time.Second):
		}
	}
}

func connectOnce(ctx context.Context, prefix string) (*pipeHost, error) {
	h := &pipeHost{prefix: prefix}
	var err error
	if h.disk, err = diskclient.NewClientWithPipePath(PipePath(prefix, groupDisk, apiVersion)); err != nil {
		return nil, notServed(prefix, groupDisk, apiVersion, err)
	}
	if h.volume, err = volumeclient.NewClientWithPipePath(PipePath(prefix, groupVolume, apiVersion)); err != nil {
		h.Close()
		return nil, notServed(prefix, groupVolume, apiVersion, err)
	}
	if h.fs, err = fsclient.NewClientWithPipePath(PipePath(prefix, groupFilesystem, apiVersion)); err != nil {
		h.Close()
		return nil, notServed(prefix, groupFilesystem, apiVersion, err)
	}
	// The volume group at v2alpha1 only dates csi-proxy.
	dating, err := volumev2alpha1client.NewClientWithPipePath(PipePath(prefix, groupVolume, datingVersion))
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("csi-proxy is older than v1.1.0: %w", notServed(prefix, groupVolume, datingVersion, err))
	}
	defer dating.Close()
	if err := h.probe(ctx, dating); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

func notServed(prefix, group, version string, err error) error {
	return fmt.Errorf("no %s API %s on %s: %v", group, version, PipePath(prefix, group, version), err)
}

// probe checks at start that csi-proxy serves every API group Diskplane
// needs and the one that dates it (see Check).
func (h *pipeHost) probe(ctx context.Context, dating *volumev2alpha1client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := h.Check(ctx); err != nil {
		return err
	}
	_, err := dating.GetClosestVolumeIDFromTargetPath(ctx, &volumev2alpha1api.GetClosestVolumeIDFromTargetPathRequest{TargetPath: `C:\`})
	if err := served(h.prefix, groupVolume, datingVersion, err); err != nil {
		return fmt.Errorf("csi-proxy is older than v1.1.0: %w", err)
	}
	klog.V(2).InfoS("csi-proxy serves disk, volume and filesystem v1, and is v1.1.0 or later", "pipes", PipePath(h.prefix, "<group>", "<version>"))
	return nil
}

// Check makes one harmless call per API group. Any answer from csi-proxy,
// an error about the request included, shows the group version is served;
// no answer, or Unimplemented, shows it is not. The plugin's /healthz asks
// it, so that a csi-proxy that stopped is seen (the clients reconnect by
// themselves when it is back).
func (h *pipeHost) Check(ctx context.Context) error {
	_, err := h.disk.GetDiskState(ctx, &diskapi.GetDiskStateRequest{DiskNumber: 0})
	if err := served(h.prefix, groupDisk, apiVersion, err); err != nil {
		return err
	}
	_, err = h.volume.ListVolumesOnDisk(ctx, &volumeapi.ListVolumesOnDiskRequest{DiskNumber: 0})
	if err := served(h.prefix, groupVolume, apiVersion, err); err != nil {
		return err
	}
	_, err = h.fs.PathExists(ctx, &fsapi.PathExistsRequest{Path: `C:\`})
	return served(h.prefix, groupFilesystem, apiVersion, err)
}

func served(prefix, group, version string, err error) error {
	switch status.Code(err) {
	case codes.Unavailable, codes.Unimplemented, codes.DeadlineExceeded, codes.Canceled:
		return fmt.Errorf("the %s API %s on %s does not answer: %v", group, version, PipePath(prefix, group, version), err)
	}
	return nil
}

func (h *pipeHost) Close() error {
	var errs []error
	if h.disk != nil {
		errs = append(errs, h.disk.Close())
	}
	if h.volume != nil {
		errs = append(errs, h.volume.Close())
	}
	if h.fs != nil {
		errs = append(errs, h.fs.Close())
	}
	return errors.Join(errs...)
}

func (h *pipeHost) ListDiskIDs(ctx context.Context) (map[uint32]DiskIDs, error) {
	resp, err := h.disk.ListDiskIDs(ctx, &diskapi.ListDiskIDsRequest{})
	if err != nil {
		return nil, err
	}
	out := make(map[uint32]DiskIDs, len(resp.GetDiskIDs()))
	for n, ids := range resp.GetDiskIDs() {
		out[n] = DiskIDs{SerialNumber: ids.GetSerialNumber(), Page83: ids.GetPage83()}
	}
	return out, nil
}

// ReadDisk fails: csi-proxy has no call that reads a disk, and the
// plugin's ordinary container cannot open the host's.
func (h *pipeHost) ReadDisk(context.Context, uint32, int64, []byte) error {
	return fmt.Errorf("%w: csi-proxy's API has no call that reads a disk", ErrNoDiskAccess)
}

func (h *pipeHost) Rescan(ctx context.Context) error {
	_, err := h.disk.Rescan(ctx, &diskapi.RescanRequest{})
	return err
}

func (h *pipeHost) DiskSize(ctx context.Context, disk uint32) (int64, error) {
	resp, err := h.disk.GetDiskStats(ctx, &diskapi.GetDiskStatsRequest{DiskNumber: disk})
	return resp.GetTotalBytes(), err
}

func (h *pipeHost) SetDiskOnline(ctx context.Context, disk uint32, online bool) error {
	_, err := h.disk.SetDiskState(ctx, &diskapi.SetDiskStateRequest{DiskNumber: disk, IsOnline: online})
	return err
}

func (h *pipeHost) PartitionDisk(ctx context.Context, disk uint32) error {
	_, err := h.disk.PartitionDisk(ctx, &diskapi.PartitionDiskRequest{DiskNumber: disk})
	return err
}

func (h *pipeHost) VolumesOnDisk(ctx context.Context, disk uint32) ([]string, error) {
	resp, err := h.volume.ListVolumesOnDisk(ctx, &volumeapi.ListVolumesOnDiskRequest{DiskNumber: disk})
	return volumeIDs(resp.GetVolumeIds()), err
}

func (h *pipeHost) IsVolumeFormatted(ctx context.Context, volume string) (bool, error) {
	resp, err := h.volume.IsVolumeFormatted(ctx, &volumeapi.IsVolumeFormattedRequest{VolumeId: volume})
	return resp.GetFormatted(), err
}

func (h *pipeHost) FormatVolume(ctx context.Context, volume string) error {
	_, err := h.volume.FormatVolume(ctx, &volumeapi.FormatVolumeRequest{VolumeId: volume})
	return err
}

func (h *pipeHost) MountVolume(ctx context.Context, volume, path string) error {
	_, err := h.volume.MountVolume(ctx, &volumeapi.MountVolumeRequest{VolumeId: volume, TargetPath: path})
	return err
}

func (h *pipeHost) UnmountVolume(ctx context.Context, volume, path string) error {
	_, err := h.volume.UnmountVolume(ctx, &volumeapi.UnmountVolumeRequest{VolumeId: volume, TargetPath: path})
	return err
}

func (h *pipeHost) ResizeVolume(ctx context.Context, volume string) error {
	_, err := h.volume.ResizeVolume(ctx, &volumeapi.ResizeVolumeRequest{VolumeId: volume})
	return err
}

func (h *pipeHost) VolumeStats(ctx context.Context, volume string) (int64, int64, error) {
	resp, err := h.volume.GetVolumeStats(ctx, &volumeapi.GetVolumeStatsRequest{VolumeId: volume})
	return resp.GetTotalBytes(), resp.GetUsedBytes(), err
}

func (h *pipeHost) DiskOfVolume(ctx context.Context, volume string) (uint32, error) {
	resp, err := h.volume.GetDiskNumberFromVolumeID(ctx, &volumeapi.GetDiskNumberFromVolumeIDRequest{VolumeId: volume})
	return resp.GetDiskNumber(), err
}

func (h *pipeHost) VolumeAt(ctx context.Context, path string) (string, error) {
	resp, err := h.volume.GetVolumeIDFromTargetPath(ctx, &volumeapi.GetVolumeIDFromTargetPathRequest{TargetPath: path})
	return resp.GetVolumeId(), err
}

func (h *pipeHost) PathExists(ctx context.Context, path string) (bool, error) {
	resp, err := h.fs.PathExists(ctx, &fsapi.PathExistsRequest{Path: path})
	return resp.GetExists(), err
}

func (h *pipeHost) Mkdir(ctx context.Context, path string) error {
	_, err := h.fs.Mkdir(ctx, &fsapi.MkdirRequest{Path: path})
	return err
}

func (h *pipeHost) Rmdir(ctx context.Context, path string) error {
	_, err := h.fs.Rmdir(ctx, &fsapi.RmdirRequest{Path: path})
	return err
}

func (h *pipeHost) CreateSymlink(ctx context.Context, source, target string) error {
	_, err := h.fs.CreateSymlink(ctx, &fsapi.CreateSymlinkRequest{SourcePath: source, TargetPath: target})
	return err
}

func (h *pipeHost) IsSymlink(ctx context.Context, path string) (bool, error) {
	resp, err := h.fs.IsSymlink(ctx, &fsapi.IsSymlinkRequest{Path: path})
	return resp.GetIsSymlink(), err
}
