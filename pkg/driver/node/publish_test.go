package node

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// staged puts the fake in the state a successful NodeStageVolume leaves.
func staged(f *fakeOS) {
	f.formats[volDev] = "ext4"
	f.fsSizes[volDev] = gib
	f.paths[staging] = "dir"
	f.mounts[staging] = fakeMount{source: volDev, fsType: "ext4"}
}

func TestNodePublishVolume(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fakeOS)
		req   func() *csi.NodePublishVolumeRequest
		code  codes.Code
		want  []string
	}{
		{
			name:  "bind mounts the staging path onto a new target directory",
			setup: staged,
			req:   func() *csi.NodePublishVolumeRequest { return publishReq(mountCap("ext4")) },
			want:  []string{"MakeDir " + target, "bind -o  " + staging + " " + target},
		},
		{
			name:  "read-only with mount flags",
			setup: staged,
			req: func() *csi.NodePublishVolumeRequest {
				r := publishReq(mountCap("ext4", "noexec", "ro"))
				r.Readonly = true
				return r
			},
			want: []string{"MakeDir " + target, "bind -o ro,noexec " + staging + " " + target},
		},
		{
			name:  "single-node reader-only is bound read-only without the readonly field",
			setup: staged,
			req: func() *csi.NodePublishVolumeRequest {
				return publishReq(withMode(mountCap("ext4", "noatime"), csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY))
			},
			want: []string{"MakeDir " + target, "bind -o ro,noatime " + staging + " " + target},
		},
		{
			name: "existing target directory is used",
			setup: func(f *fakeOS) {
				staged(f)
				f.paths[target] = "dir"
			},
			req:  func() *csi.NodePublishVolumeRequest { return publishReq(mountCap("ext4")) },
			want: []string{"bind -o  " + staging + " " + target},
		},
		{
			name: "already published: nothing to do",
			setup: func(f *fakeOS) {
				staged(f)
				f.paths[target] = "dir"
				f.mounts[target] = fakeMount{source: staging}
			},
			req: func() *csi.NodePublishVolumeRequest { return publishReq(mountCap("ext4")) },
		},
		{
			name: "already published read-only: the read-only repeat succeeds",
			setup: func(f *fakeOS) {
				staged(f)
				f.paths[target] = "dir"
				f.mounts[target] = fakeMount{source: staging, options: []string{"ro"}}
			},
			req: func() *csi.NodePublishVolumeRequest {
				r := publishReq(mountCap("ext4"))
				r.Readonly = true
				return r
			},
		},
		{
			name: "already published read-write, asked read-only: already exists, nothing touched",
			setup: func(f *fakeOS) {
				staged(f)
				f.paths[target] = "dir"
				f.mounts[target] = fakeMount{source: staging}
			},
			req: func() *csi.NodePublishVolumeRequest {
				r := publishReq(mountCap("ext4"))
				r.Readonly = true
				return r
			},
			code: codes.AlreadyExists,
		},
		{
			name: "already published read-only, asked read-write: already exists",
			setup: func(f *fakeOS) {
				staged(f)
				f.paths[target] = "dir"
				f.mounts[target] = fakeMount{source: staging, options: []string{"ro"}}
			},
			req:  func() *csi.NodePublishVolumeRequest { return publishReq(mountCap("ext4")) },
			code: codes.AlreadyExists,
		},
		{
			name: "already published, its mount options unreadable",
			setup: func(f *fakeOS) {
				staged(f)
				f.paths[target] = "dir"
				f.mounts[target] = fakeMount{source: staging}
				f.failOn["MountedReadOnly"] = errors.New("mountinfo unreadable")
			},
			req:  func() *csi.NodePublishVolumeRequest { return publishReq(mountCap("ext4")) },
			code: codes.Internal,
		},
		{
			name: "corrupted target mount is unmounted and bound again",
			setup: func(f *fakeOS) {
				staged(f)
				f.paths[target] = "dir"
				f.corrupted[target] = true
			},
			req:  func() *csi.NodePublishVolumeRequest { return publishReq(mountCap("ext4")) },
			want: []string{"umount " + target, "bind -o  " + staging + " " + target},
		},
		{
			name: "not staged",
			req:  func() *csi.NodePublishVolumeRequest { return publishReq(mountCap("ext4")) },
			code: codes.FailedPrecondition,
		},
		{
			name:  "staging directory exists but nothing is mounted there",
			setup: func(f *fakeOS) { f.paths[staging] = "dir" },
			req:   func() *csi.NodePublishVolumeRequest { return publishReq(mountCap("ext4")) },
			code:  codes.FailedPrecondition,
		},
		{
			name: "block: the device node is bound onto a new file",
			req:  func() *csi.NodePublishVolumeRequest { return publishReq(blockCap()) },
			want: []string{"MakeFile " + target, "bind -o  " + volDev + " " + target},
		},
		{
			name: "block read-only, multi-attach",
			req: func() *csi.NodePublishVolumeRequest {
				r := publishReq(withMode(blockCap(), csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER))
				r.Readonly = true
				return r
			},
			want: []string{"MakeFile " + target, "bind -o ro " + volDev + " " + target},
		},
		{
			name: "block multi-node reader-only is bound read-only",
			req: func() *csi.NodePublishVolumeRequest {
				return publishReq(withMode(blockCap(), csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY))
			},
			want: []string{"MakeFile " + target, "bind -o ro " + volDev + " " + target},
		},
		{
			name: "block single-node reader-only is bound read-only",
			req: func() *csi.NodePublishVolumeRequest {
				return publishReq(withMode(blockCap(), csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY))
			},
			want: []string{"MakeFile " + target, "bind -o ro " + volDev + " " + target},
		},
		{
			name: "block needs no staging path",
			req: func() *csi.NodePublishVolumeRequest {
				r := publishReq(blockCap())
				r.StagingTargetPath = ""
				return r
			},
			want: []string{"MakeFile " + target, "bind -o  " + volDev + " " + target},
		},
		{
			name: "block already published",
			setup: func(f *fakeOS) {
				f.paths[target] = "file"
				f.mounts[target] = fakeMount{source: volDev}
			},
			req: func() *csi.NodePublishVolumeRequest { return publishReq(blockCap()) },
		},
		{
			name: "block already published read-write, asked by a reader-only mode: already exists",
			setup: func(f *fakeOS) {
				f.paths[target] = "file"
				f.mounts[target] = fakeMount{source: volDev}
			},
			req: func() *csi.NodePublishVolumeRequest {
				return publishReq(withMode(blockCap(), csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY))
			},
			code: codes.AlreadyExists,
		},
		{
			name: "bind mount failure",
			setup: func(f *fakeOS) {
				staged(f)
				f.failOn["BindMount"] = errors.New("mount: permission denied")
			},
			req:  func() *csi.NodePublishVolumeRequest { return publishReq(mountCap("ext4")) },
			code: codes.Internal,
			want: []string{"MakeDir " + target},
		},
		{
			name:  "block bind mount failure",
			setup: func(f *fakeOS) { f.failOn["BindMount"] = errors.New("mount: permission denied") },
			req:   func() *csi.NodePublishVolumeRequest { return publishReq(blockCap()) },
			code:  codes.Internal,
			want:  []string{"MakeFile " + target},
		},
		{
			name:  "block device not found",
			setup: func(f *fakeOS) { delete(f.devices, volID) },
			req:   func() *csi.NodePublishVolumeRequest { return publishReq(blockCap()) },
			code:  codes.NotFound,
		},
		{
			name:  "block device of another volume is refused",
			setup: func(f *fakeOS) { f.wrongDevice[volID] = true },
			req:   func() *csi.NodePublishVolumeRequest { return publishReq(blockCap()) },
			code:  codes.FailedPrecondition,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newTestService(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			_, err := s.NodePublishVolume(context.Background(), tc.req())
			wantCode(t, err, tc.code)
			if !reflect.DeepEqual(f.calls, tc.want) {
				t.Fatalf("OS calls:\n got %q\nwant %q", f.calls, tc.want)
			}
		})
	}
}

func TestNodeUnpublishVolume(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fakeOS)
		code  codes.Code
		want  []string
	}{
		{
			name: "mounted directory: unmounted and removed",
			setup: func(f *fakeOS) {
				f.paths[target] = "dir"
				f.mounts[target] = fakeMount{source: staging}
			},
			want: []string{"umount " + target, "remove " + target},
		},
		{
			name: "block file: unmounted and removed",
			setup: func(f *fakeOS) {
				f.paths[target] = "file"
				f.mounts[target] = fakeMount{source: volDev}
			},
			want: []string{"umount " + target, "remove " + target},
		},
		{name: "left over directory is removed", setup: func(f *fakeOS) { f.paths[target] = "dir" }, want: []string{"remove " + target}},
		{name: "gone: done"},
		{
			name: "corrupted mount: unmounted and removed",
			setup: func(f *fakeOS) {
				f.paths[target] = "dir"
				f.corrupted[target] = true
			},
			want: []string{"umount " + target, "remove " + target},
		},
		{
			name: "unmount failure",
			setup: func(f *fakeOS) {
				f.paths[target] = "dir"
				f.mounts[target] = fakeMount{source: staging}
				f.failOn["CleanupMountPoint"] = errors.New("target is busy")
			},
			code: codes.Internal,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newTestService(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			_, err := s.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target})
			wantCode(t, err, tc.code)
			if !reflect.DeepEqual(f.calls, tc.want) {
				t.Fatalf("OS calls:\n got %q\nwant %q", f.calls, tc.want)
			}
		})
	}
}

// TestPublishTwice checks that a repeated publish and a repeated unpublish
// each act once.
func TestPublishTwice(t *testing.T) {
	s, f := newTestService(t)
	staged(f)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		_, err := s.NodePublishVolume(ctx, publishReq(mountCap("ext4")))
		wantCode(t, err, codes.OK)
	}
	for i := 0; i < 2; i++ {
		_, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target})
		wantCode(t, err, codes.OK)
	}
	if n := len(f.recorded("bind")); n != 1 {
		t.Fatalf("bound %d times, want once", n)
	}
	if n := len(f.recorded("umount")); n != 1 {
		t.Fatalf("unmounted %d times, want once", n)
	}
	if _, mounted := f.mountedAt(staging); !mounted {
		t.Fatal("unpublish must not touch the staging mount")
	}
}

// TestPublishSingleWriter checks the spec's table for a second
// NodePublishVolume of a volume at another target: refused for
// SINGLE_NODE_SINGLE_WRITER (before anything is created), allowed for the
// multi-writer modes and for SINGLE_NODE_WRITER.
func TestPublishSingleWriter(t *testing.T) {
	other := filepath.Join(kubeletDir, "pods", "p2", "volumes", "kubernetes.io~csi", "pvc-1", "mount")
	publishedElsewhere := func(f *fakeOS) {
		staged(f)
		f.paths[other] = "dir"
		f.mounts[other] = fakeMount{source: staging}
	}
	blockPublishedElsewhere := func(f *fakeOS) {
		f.paths[other] = "file"
		f.mounts[other] = fakeMount{source: volDev}
	}
	single := csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	tests := []struct {
		name  string
		setup func(f *fakeOS)
		cap   *csi.VolumeCapability
		code  codes.Code
		want  []string
	}{
		{
			name:  "single writer: the first publication",
			setup: staged,
			cap:   withMode(mountCap("ext4"), single),
			want:  []string{"MakeDir " + target, "bind -o  " + staging + " " + target},
		},
		{
			name: "single writer: a repeat at the same target is done",
			setup: func(f *fakeOS) {
				staged(f)
				f.paths[target] = "dir"
				f.mounts[target] = fakeMount{source: staging}
			},
			cap: withMode(mountCap("ext4"), single),
		},
		{
			name:  "single writer: refused while published at another target",
			setup: publishedElsewhere,
			cap:   withMode(mountCap("ext4"), single),
			code:  codes.FailedPrecondition,
		},
		{
			name:  "single writer block: refused while published at another target",
			setup: blockPublishedElsewhere,
			cap:   withMode(blockCap(), single),
			code:  codes.FailedPrecondition,
		},
		{
			name: "single writer: the publications cannot be listed",
			setup: func(f *fakeOS) {
				staged(f)
				f.failOn["MountRefs"] = errors.New("mountinfo unreadable")
			},
			cap:  withMode(mountCap("ext4"), single),
			code: codes.Internal,
		},
		{
			name:  "multi writer: a second target",
			setup: publishedElsewhere,
			cap:   withMode(mountCap("ext4"), csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER),
			want:  []string{"MakeDir " + target, "bind -o  " + staging + " " + target},
		},
		{
			name:  "single node writer: a second target, as older COs ask for pods sharing a volume",
			setup: publishedElsewhere,
			cap:   mountCap("ext4"),
			want:  []string{"MakeDir " + target, "bind -o  " + staging + " " + target},
		},
		{
			name:  "multi-node block: a second target",
			setup: blockPublishedElsewhere,
			cap:   withMode(blockCap(), csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER),
			want:  []string{"MakeFile " + target, "bind -o  " + volDev + " " + target},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newTestService(t)
			tc.setup(f)
			_, err := s.NodePublishVolume(context.Background(), publishReq(tc.cap))
			wantCode(t, err, tc.code)
			if !reflect.DeepEqual(f.calls, tc.want) {
				t.Fatalf("OS calls:\n got %q\nwant %q", f.calls, tc.want)
			}
		})
	}
}
