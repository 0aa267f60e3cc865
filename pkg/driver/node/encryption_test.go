package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/mounter"
)

const secretPass = "correct horse battery staple"

var (
	encryptedContext = map[string]string{"nodeEncryption": "luks2"}
	stageSecrets     = map[string]string{"luksPassphrase": secretPass}
)

func encryptedStageReq(c *csi.VolumeCapability, secrets map[string]string) *csi.NodeStageVolumeRequest {
	r := stageReq(c)
	r.VolumeContext, r.Secrets = encryptedContext, secrets
	return r
}

func expandReq(secrets map[string]string) *csi.NodeExpandVolumeRequest {
	return &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: staging, StagingTargetPath: staging,
		VolumeCapability: mountCap("ext4"), Secrets: secrets}
}

// TestStageEncrypted covers what NodeStageVolume does with a volume whose
// context asks for node encryption, from each state the device can be in.
func TestStageEncrypted(t *testing.T) {
	mapping := fakeMapping(volID)
	tests := []struct {
		name      string
		prepare   func(f *fakeOS)
		req       *csi.NodeStageVolumeRequest
		wantCode  codes.Code
		wantMsg   string
		wantCalls []string // the calls made, in order, among luks*, mkfs*, mount*, cryptsetup*
	}{
		{
			name: "blank: LUKS2, then a filesystem on the mapping",
			req:  encryptedStageReq(mountCap("ext4"), stageSecrets),
			wantCalls: []string{"luksFormat " + volDev, "luksOpen " + volDev + " " + mapping, "mkfs.ext4  " + mapping,
				"mount -t ext4 -o  " + mapping + " " + staging},
		},
		{
			name: "LUKS header: opened, its filesystem mounted as it is",
			prepare: func(f *fakeOS) {
				f.formats[volDev], f.luksKeys[volDev], f.formats[mapping] = "crypto_LUKS", secretPass, "ext4"
			},
			req:       encryptedStageReq(mountCap("ext4"), stageSecrets),
			wantCalls: []string{"luksOpen " + volDev + " " + mapping, "mount -t ext4 -o  " + mapping + " " + staging},
		},
		{
			name:     "no secret: nothing happens",
			req:      encryptedStageReq(mountCap("ext4"), nil),
			wantCode: codes.InvalidArgument,
			wantMsg:  "csi.storage.k8s.io/node-stage-secret-name",
		},
		{
			name:     "a secret without the passphrase key",
			req:      encryptedStageReq(mountCap("ext4"), map[string]string{"passphrase": secretPass}),
			wantCode: codes.InvalidArgument,
			wantMsg:  `"luksPassphrase"`,
		},
		{
			name:     "wrong passphrase: nothing written",
			prepare:  func(f *fakeOS) { f.formats[volDev], f.luksKeys[volDev] = "crypto_LUKS", "another one" },
			req:      encryptedStageReq(mountCap("ext4"), stageSecrets),
			wantCode: codes.PermissionDenied,
			wantMsg:  "is not this volume's passphrase",
		},
		{
			name:     "a plain filesystem is never encrypted over",
			prepare:  func(f *fakeOS) { f.formats[volDev] = "ext4" },
			req:      encryptedStageReq(mountCap("ext4"), stageSecrets),
			wantCode: codes.FailedPrecondition,
		},
		{
			name: "unknown node encryption",
			req: func() *csi.NodeStageVolumeRequest {
				r := stageReq(mountCap("ext4"))
				r.VolumeContext = map[string]string{"nodeEncryption": "rot13"}
				return r
			}(),
			wantCode: codes.InvalidArgument,
		},
		{
			name:      "block: the mapping is opened, nothing mounted",
			req:       encryptedStageReq(blockCap(), stageSecrets),
			wantCalls: []string{"luksFormat " + volDev, "luksOpen " + volDev + " " + mapping},
		},
		{
			name: "a kernel without device-mapper",
			prepare: func(f *fakeOS) {
				f.failOn["OpenEncrypted"] = fmt.Errorf("%w: no dm-crypt", mounter.ErrEncryptionUnavailable)
			},
			req:      encryptedStageReq(mountCap("ext4"), stageSecrets),
			wantCode: codes.FailedPrecondition,
			wantMsg:  "no dm-crypt",
		},
		{
			name: "a mapping left open by a plugin that restarted is reused",
			prepare: func(f *fakeOS) {
				f.formats[volDev], f.luksKeys[volDev], f.formats[mapping] = "crypto_LUKS", secretPass, "ext4"
				f.mappings[volID] = volDev
				f.deviceSizes[mapping] = f.deviceSizes[volDev] - luksHeaderBytes
			},
			req:       encryptedStageReq(mountCap("ext4"), stageSecrets),
			wantCalls: []string{"mount -t ext4 -o  " + mapping + " " + staging},
		},
		{
			// Before, the open mapping was reused whatever the secret said,
			// and the wrong passphrase showed only after the next reboot.
			name: "a mapping left open, and another passphrase: refused, nothing mounted",
			prepare: func(f *fakeOS) {
				f.formats[volDev], f.luksKeys[volDev], f.formats[mapping] = "crypto_LUKS", "the old one", "ext4"
				f.mappings[volID] = volDev
				f.deviceSizes[mapping] = f.deviceSizes[volDev] - luksHeaderBytes
			},
			req:      encryptedStageReq(mountCap("ext4"), stageSecrets),
			wantCode: codes.PermissionDenied,
			wantMsg:  "is not this volume's passphrase",
		},
		{
			name: "grown while detached: the open mapping grows with the stage passphrase",
			prepare: func(f *fakeOS) {
				f.formats[volDev], f.luksKeys[volDev], f.formats[mapping] = "crypto_LUKS", secretPass, "ext4"
				f.mappings[volID] = volDev
				f.deviceSizes[mapping] = f.deviceSizes[volDev] - luksHeaderBytes
				f.deviceSizes[volDev] *= 2
			},
			req:       encryptedStageReq(mountCap("ext4"), stageSecrets),
			wantCalls: []string{"cryptsetup resize " + mapping, "mount -t ext4 -o  " + mapping + " " + staging},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newTestService(t)
			if tc.prepare != nil {
				tc.prepare(f)
			}
			_, err := s.NodeStageVolume(context.Background(), tc.req)
			wantCode(t, err, tc.wantCode)
			if tc.wantMsg != "" && !strings.Contains(status.Convert(err).Message(), tc.wantMsg) {
				t.Fatalf("message %q lacks %q", status.Convert(err).Message(), tc.wantMsg)
			}
			if strings.Contains(fmt.Sprint(err), secretPass) {
				t.Fatalf("the passphrase is in the error: %v", err)
			}
			var got []string
			for _, c := range f.recorded("") {
				if strings.HasPrefix(c, "luks") || strings.HasPrefix(c, "mkfs") || strings.HasPrefix(c, "mount") || strings.HasPrefix(c, "cryptsetup") {
					got = append(got, c)
				}
			}
			if !slices.Equal(got, tc.wantCalls) {
				t.Fatalf("calls %q, want %q", got, tc.wantCalls)
			}
		})
	}
}

// TestEncryptedLifecycle stages, publishes (block: the mapping is what is
// bound), unpublishes and unstages an encrypted volume, and unstages again
// after a crash between the unmount and the close.
func TestEncryptedLifecycle(t *testing.T) {
	for _, c := range []*csi.VolumeCapability{mountCap("ext4"), blockCap()} {
		block := c.GetBlock() != nil
		t.Run(fmt.Sprintf("block=%v", block), func(t *testing.T) {
			s, f := newTestService(t)
			pub := publishReq(c)
			pub.VolumeContext = encryptedContext
			if !block {
				wantCode(t, publishFirst(s, pub), codes.FailedPrecondition)
			} else {
				_, err := s.NodePublishVolume(context.Background(), pub)
				wantCode(t, err, codes.FailedPrecondition) // the mapping is not open yet
			}
			if _, err := s.NodeStageVolume(context.Background(), encryptedStageReq(c, stageSecrets)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.NodePublishVolume(context.Background(), pub); err != nil {
				t.Fatal(err)
			}
			m, ok := f.mountedAt(target)
			if !ok {
				t.Fatal("nothing published")
			}
			if block && m.source != fakeMapping(volID) {
				t.Fatalf("block volume published from %s, want its mapping", m.source)
			}
			if _, err := s.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target}); err != nil {
				t.Fatal(err)
			}
			unstage := &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: staging}
			if _, err := s.NodeUnstageVolume(context.Background(), unstage); err != nil {
				t.Fatal(err)
			}
			if len(f.recorded("luksClose")) != 1 || len(f.mappings) != 0 {
				t.Fatalf("closes %v, mappings %v after unstage", f.recorded("luksClose"), f.mappings)
			}
			if _, err := s.NodeUnstageVolume(context.Background(), unstage); err != nil {
				t.Fatalf("a repeated unstage: %v", err)
			}
			// A crash between the unmount and the close: the next unstage closes.
			f.mappings[volID] = volDev
			if _, err := s.NodeUnstageVolume(context.Background(), unstage); err != nil || len(f.mappings) != 0 {
				t.Fatalf("unstage after a crash = %v, mappings %v", err, f.mappings)
			}
		})
	}
}

// publishFirst publishes a filesystem volume that was never staged.
func publishFirst(s *Service, req *csi.NodePublishVolumeRequest) error {
	_, err := s.NodePublishVolume(context.Background(), req)
	return err
}

// TestExpandEncrypted grows a mounted encrypted volume: the mapping with the
// node-expand secret's passphrase, then the filesystem on it; the capacity
// reported is the volume's, not the mapping's.
func TestExpandEncrypted(t *testing.T) {
	tests := []struct {
		name     string
		secrets  map[string]string
		grown    bool
		wantCode codes.Code
		wantMsg  string
	}{
		{name: "grown, with the secret", secrets: stageSecrets, grown: true},
		{name: "not grown needs no secret", grown: false},
		{name: "grown, no secret", grown: true, wantCode: codes.FailedPrecondition, wantMsg: "csi.storage.k8s.io/node-expand-secret-name"},
		{name: "grown, wrong passphrase", secrets: map[string]string{"luksPassphrase": "nope"}, grown: true, wantCode: codes.PermissionDenied, wantMsg: "node-expand secret"},
		// A node-expand secret given is checked even with nothing to grow.
		{name: "not grown, wrong passphrase", secrets: map[string]string{"luksPassphrase": "nope"}, grown: false, wantCode: codes.PermissionDenied, wantMsg: "node-expand secret"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newTestService(t)
			if _, err := s.NodeStageVolume(context.Background(), encryptedStageReq(mountCap("ext4"), stageSecrets)); err != nil {
				t.Fatal(err)
			}
			if tc.grown {
				f.deviceSizes[volDev] = 2 * gib
			}
			resp, err := s.NodeExpandVolume(context.Background(), expandReq(tc.secrets))
			wantCode(t, err, tc.wantCode)
			if tc.wantCode != codes.OK {
				if !strings.Contains(status.Convert(err).Message(), tc.wantMsg) {
					t.Fatalf("message %q lacks %q", status.Convert(err).Message(), tc.wantMsg)
				}
				return
			}
			if resp.GetCapacityBytes() != f.deviceSizes[volDev] {
				t.Fatalf("capacity %d, want the volume's %d", resp.GetCapacityBytes(), f.deviceSizes[volDev])
			}
			mapping := fakeMapping(volID)
			if f.fsSizes[mapping] != f.deviceSizes[volDev]-luksHeaderBytes {
				t.Fatalf("filesystem %d bytes, want the grown mapping's %d", f.fsSizes[mapping], f.deviceSizes[volDev]-luksHeaderBytes)
			}
		})
	}
}

// TestEncryptionRefusedOnWindows: a Windows node cannot encrypt, so it
// refuses an encrypted volume before anything touches the disk.
func TestEncryptionRefusedOnWindows(t *testing.T) {
	f := newFakeOS()
	f.platform = mounter.WindowsPlatform
	f.addVolume(volID, volDev, gib)
	s, err := New(Config{Metadata: staticMetadata(testInstance()), Mounter: f, ReservedVolumeAttachments: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.NodeStageVolume(context.Background(), encryptedStageReq(mountCap("ntfs"), stageSecrets))
	wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(err.Error(), "not supported on windows nodes") {
		t.Fatalf("message %q does not say Windows cannot do it", err)
	}
	if calls := f.recorded(""); len(calls) != 0 {
		t.Fatalf("the node acted on the disk: %v", calls)
	}
}
