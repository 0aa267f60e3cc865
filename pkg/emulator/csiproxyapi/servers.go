// Package csiproxyapi serves the csi-proxy API groups a node plugin uses
// (disk, volume and filesystem, version v1, as csi-proxy v1.3.0 defines and
// answers them, or as an older Release) over an emulated Windows host
// (pkg/emulator/winhost), so the real Windows build of Diskplane's node
// plugin can run against it under Wine. On Windows it listens on
// csi-proxy's own pipe names (\\.\pipe\csi-proxy-<group>-<version>); the
// servers themselves are plain gRPC services, tested on any OS.
//
// Like csi-proxy, errors are plain messages (gRPC code Unknown), and the
// filesystem API refuses paths outside its working directories (csi-proxy's
// -kubelet-path, C:\var\lib\kubelet by default).
package csiproxyapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	diskv1 "github.com/kubernetes-csi/csi-proxy/client/api/disk/v1"
	fsv1 "github.com/kubernetes-csi/csi-proxy/client/api/filesystem/v1"
	volumev1 "github.com/kubernetes-csi/csi-proxy/client/api/volume/v1"
	volumev2alpha1 "github.com/kubernetes-csi/csi-proxy/client/api/volume/v2alpha1"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/winhost"
)

// handshakeTimeout is how long a new connection may take to start speaking
// gRPC.
const handshakeTimeout = 5 * time.Second

// DefaultWorkingDir is csi-proxy's default -kubelet-path.
const DefaultWorkingDir = `C:\var\lib\kubelet`

// API group names, as in csi-proxy's pipe names.
const (
	GroupDisk       = "disk"
	GroupVolume     = "volume"
	GroupFilesystem = "filesystem"
)

// API is an API group at a version: csi-proxy serves each on a pipe of its
// own.
type API struct {
	Group, Version string
}

// Groups returns a gRPC server per API group version that release serves
// over host: disk, volume and filesystem at v1, and volume at v2alpha1
// from v1.1.0 (only GetClosestVolumeIDFromTargetPath: no plugin asks it for
// more). workingDirs are the directories the filesystem API may touch; none
// means DefaultWorkingDir. The host's own behaviour for the release
// (winhost.Config.MountByAccessPath) is the caller's to set.
func Groups(host *winhost.Host, release Release, workingDirs []string) map[API]*grpc.Server {
	if len(workingDirs) == 0 {
		workingDirs = []string{DefaultWorkingDir}
	}
	// The csi-proxy client checks that a pipe exists by connecting to it and
	// never speaks on that connection (nor closes it); with gRPC's default
	// handshake timeout (120 s) each such connection would hold up Stop.
	opt := grpc.ConnectionTimeout(handshakeTimeout)
	servers := map[API]*grpc.Server{}
	add := func(group, version string) *grpc.Server {
		s := grpc.NewServer(opt)
		servers[API{group, version}] = s
		return s
	}
	diskv1.RegisterDiskServer(add(GroupDisk, "v1"), &diskServer{host: host})
	volumev1.RegisterVolumeServer(add(GroupVolume, "v1"), &volumeServer{host: host})
	fsv1.RegisterFilesystemServer(add(GroupFilesystem, "v1"), &filesystemServer{host: host, workingDirs: workingDirs})
	if release.VolumeV2Alpha1 {
		volumev2alpha1.RegisterVolumeServer(add(GroupVolume, "v2alpha1"), &volumeV2Alpha1Server{host: host})
	}
	return servers
}

// diskServer is the disk API group, v1.
type diskServer struct {
	diskv1.UnimplementedDiskServer
	host *winhost.Host
}

func (s *diskServer) ListDiskLocations(context.Context, *diskv1.ListDiskLocationsRequest) (*diskv1.ListDiskLocationsResponse, error) {
	locations, err := s.host.ListDiskLocations()
	if err != nil {
		return nil, err
	}
	resp := &diskv1.ListDiskLocationsResponse{DiskLocations: map[uint32]*diskv1.DiskLocation{}}
	for n, l := range locations {
		resp.DiskLocations[n] = &diskv1.DiskLocation{Adapter: l.Adapter, Bus: l.Bus, Target: l.Target, LUNID: l.LUNID}
	}
	return resp, nil
}

// PartitionDisk is csi-proxy's: initialize a raw disk GPT, then create a
// basic partition unless one (other than the MSR) exists.
func (s *diskServer) PartitionDisk(_ context.Context, req *diskv1.PartitionDiskRequest) (*diskv1.PartitionDiskResponse, error) {
	n := req.GetDiskNumber()
	initialized, err := s.host.IsDiskInitialized(n)
	if err != nil {
		return nil, err
	}
	if !initialized {
		if err := s.host.InitializeDisk(n); err != nil {
			return nil, err
		}
	}
	partitioned, err := s.host.BasicPartitionsExist(n)
	if err != nil {
		return nil, err
	}
	if !partitioned {
		if err := s.host.CreateBasicPartition(n); err != nil {
			return nil, err
		}
	}
	return &diskv1.PartitionDiskResponse{}, nil
}

func (s *diskServer) Rescan(context.Context, *diskv1.RescanRequest) (*diskv1.RescanResponse, error) {
	return &diskv1.RescanResponse{}, s.host.Rescan()
}

func (s *diskServer) ListDiskIDs(context.Context, *diskv1.ListDiskIDsRequest) (*diskv1.ListDiskIDsResponse, error) {
	ids, err := s.host.ListDiskIDs()
	if err != nil {
		return nil, err
	}
	resp := &diskv1.ListDiskIDsResponse{DiskIDs: map[uint32]*diskv1.DiskIDs{}}
	for n, id := range ids {
		resp.DiskIDs[n] = &diskv1.DiskIDs{Page83: id.Page83, SerialNumber: id.SerialNumber}
	}
	return resp, nil
}

func (s *diskServer) GetDiskStats(_ context.Context, req *diskv1.GetDiskStatsRequest) (*diskv1.GetDiskStatsResponse, error) {
	size, err := s.host.GetDiskStats(req.GetDiskNumber())
	if err != nil {
		return nil, err
	}
	return &diskv1.GetDiskStatsResponse{TotalBytes: size}, nil
}

func (s *diskServer) SetDiskState(_ context.Context, req *diskv1.SetDiskStateRequest) (*diskv1.SetDiskStateResponse, error) {
	return &diskv1.SetDiskStateResponse{}, s.host.SetDiskState(req.GetDiskNumber(), req.GetIsOnline())
}

func (s *diskServer) GetDiskState(_ context.Context, req *diskv1.GetDiskStateRequest) (*diskv1.GetDiskStateResponse, error) {
	online, err := s.host.GetDiskState(req.GetDiskNumber())
	if err != nil {
		return nil, err
	}
	return &diskv1.GetDiskStateResponse{IsOnline: online}, nil
}

// volumeServer is the volume API group, v1.
type volumeServer struct {
	volumev1.UnimplementedVolumeServer
	host *winhost.Host
}

var errNoVolumeID = errors.New("volume id empty")

func (s *volumeServer) ListVolumesOnDisk(_ context.Context, req *volumev1.ListVolumesOnDiskRequest) (*volumev1.ListVolumesOnDiskResponse, error) {
	ids, err := s.host.ListVolumesOnDisk(req.GetDiskNumber(), req.GetPartitionNumber())
	if err != nil {
		return nil, err
	}
	return &volumev1.ListVolumesOnDiskResponse{VolumeIds: ids}, nil
}

func (s *volumeServer) MountVolume(_ context.Context, req *volumev1.MountVolumeRequest) (*volumev1.MountVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, errors.New("MountVolumeRequest.VolumeId is empty")
	case req.GetTargetPath() == "":
		return nil, errors.New("MountVolumeRequest.TargetPath is empty")
	}
	return &volumev1.MountVolumeResponse{}, s.host.MountVolume(req.GetVolumeId(), req.GetTargetPath())
}

func (s *volumeServer) UnmountVolume(_ context.Context, req *volumev1.UnmountVolumeRequest) (*volumev1.UnmountVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, errNoVolumeID
	case req.GetTargetPath() == "":
		return nil, errors.New("target path empty")
	}
	if err := s.host.WriteVolumeCache(req.GetVolumeId()); err != nil {
		return nil, err
	}
	return &volumev1.UnmountVolumeResponse{}, s.host.UnmountVolume(req.GetVolumeId(), req.GetTargetPath())
}

func (s *volumeServer) IsVolumeFormatted(_ context.Context, req *volumev1.IsVolumeFormattedRequest) (*volumev1.IsVolumeFormattedResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errNoVolumeID
	}
	formatted, err := s.host.IsVolumeFormatted(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	return &volumev1.IsVolumeFormattedResponse{Formatted: formatted}, nil
}

func (s *volumeServer) FormatVolume(_ context.Context, req *volumev1.FormatVolumeRequest) (*volumev1.FormatVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errNoVolumeID
	}
	return &volumev1.FormatVolumeResponse{}, s.host.FormatVolume(req.GetVolumeId())
}

func (s *volumeServer) WriteVolumeCache(_ context.Context, req *volumev1.WriteVolumeCacheRequest) (*volumev1.WriteVolumeCacheResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errNoVolumeID
	}
	return &volumev1.WriteVolumeCacheResponse{}, s.host.WriteVolumeCache(req.GetVolumeId())
}

func (s *volumeServer) ResizeVolume(_ context.Context, req *volumev1.ResizeVolumeRequest) (*volumev1.ResizeVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errNoVolumeID
	}
	return &volumev1.ResizeVolumeResponse{}, s.host.ResizeVolume(req.GetVolumeId(), req.GetSizeBytes())
}

func (s *volumeServer) GetVolumeStats(_ context.Context, req *volumev1.GetVolumeStatsRequest) (*volumev1.GetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errNoVolumeID
	}
	total, used, err := s.host.GetVolumeStats(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	return &volumev1.GetVolumeStatsResponse{TotalBytes: total, UsedBytes: used}, nil
}

func (s *volumeServer) GetDiskNumberFromVolumeID(_ context.Context, req *volumev1.GetDiskNumberFromVolumeIDRequest) (*volumev1.GetDiskNumberFromVolumeIDResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errNoVolumeID
	}
	n, err := s.host.GetDiskNumberFromVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	return &volumev1.GetDiskNumberFromVolumeIDResponse{DiskNumber: n}, nil
}

func (s *volumeServer) GetVolumeIDFromTargetPath(_ context.Context, req *volumev1.GetVolumeIDFromTargetPathRequest) (*volumev1.GetVolumeIDFromTargetPathResponse, error) {
	if req.GetTargetPath() == "" {
		return nil, errors.New("target path is empty")
	}
	id, err := s.host.GetVolumeIDFromTargetPath(req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	return &volumev1.GetVolumeIDFromTargetPathResponse{VolumeId: id}, nil
}

// filesystemServer is the filesystem API group, v1: it touches only paths
// in its working directories.
type filesystemServer struct {
	fsv1.UnimplementedFilesystemServer
	host        *winhost.Host
	workingDirs []string
}

func (s *filesystemServer) check(path string) error {
	if err := winhost.ValidatePath(path); err != nil {
		return err
	}
	for _, dir := range s.workingDirs {
		if strings.HasPrefix(strings.ToLower(path), strings.ToLower(dir)) {
			return nil
		}
	}
	klog.V(2).InfoS("Refused a path outside the working directories", "path", path, "workingDirs", s.workingDirs)
	return fmt.Errorf("path: %s is not within the working directories: %v", path, s.workingDirs)
}

func (s *filesystemServer) PathExists(_ context.Context, req *fsv1.PathExistsRequest) (*fsv1.PathExistsResponse, error) {
	if err := s.check(req.GetPath()); err != nil {
		return nil, err
	}
	exists, err := s.host.PathExists(req.GetPath())
	if err != nil {
		return nil, err
	}
	return &fsv1.PathExistsResponse{Exists: exists}, nil
}

func (s *filesystemServer) Mkdir(_ context.Context, req *fsv1.MkdirRequest) (*fsv1.MkdirResponse, error) {
	if err := s.check(req.GetPath()); err != nil {
		return nil, err
	}
	return &fsv1.MkdirResponse{}, s.host.Mkdir(req.GetPath())
}

func (s *filesystemServer) Rmdir(_ context.Context, req *fsv1.RmdirRequest) (*fsv1.RmdirResponse, error) {
	if err := s.check(req.GetPath()); err != nil {
		return nil, err
	}
	return &fsv1.RmdirResponse{}, s.host.Rmdir(req.GetPath(), req.GetForce())
}

func (s *filesystemServer) CreateSymlink(_ context.Context, req *fsv1.CreateSymlinkRequest) (*fsv1.CreateSymlinkResponse, error) {
	for _, p := range []string{req.GetTargetPath(), req.GetSourcePath()} {
		if err := s.check(p); err != nil {
			return nil, err
		}
	}
	return &fsv1.CreateSymlinkResponse{}, s.host.CreateSymlink(req.GetSourcePath(), req.GetTargetPath())
}

func (s *filesystemServer) IsSymlink(_ context.Context, req *fsv1.IsSymlinkRequest) (*fsv1.IsSymlinkResponse, error) {
	is, err := s.host.IsSymlink(req.GetPath())
	if err != nil {
		return nil, err
	}
	return &fsv1.IsSymlinkResponse{IsSymlink: is}, nil
}

// volumeV2Alpha1Server is the volume API group at v2alpha1, as far as a
// plugin asks it: whether it is there.
type volumeV2Alpha1Server struct {
	volumev2alpha1.UnimplementedVolumeServer
	host *winhost.Host
}

func (s *volumeV2Alpha1Server) GetClosestVolumeIDFromTargetPath(_ context.Context, req *volumev2alpha1.GetClosestVolumeIDFromTargetPathRequest) (*volumev2alpha1.GetClosestVolumeIDFromTargetPathResponse, error) {
	id, err := s.host.GetClosestVolumeIDFromTargetPath(req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	return &volumev2alpha1.GetClosestVolumeIDFromTargetPathResponse{VolumeId: id}, nil
}
