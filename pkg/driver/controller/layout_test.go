package controller

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

func TestCheckSourceLayout(t *testing.T) {
	tests := []struct {
		source, layout string
		refused        bool
	}{
		{"ext4", "ext4", false},
		{"luks2:xfs", "luks2:xfs", false},
		{"", "ntfs", false},      // made before the tag: unknown
		{"ext4", "", false},      // the class names no filesystem
		{"ext4", "block", false}, // raw access formats nothing
		{"block", "ext4", false}, // a Linux node looks at what is there
		{"ext4", "ntfs", true},   // a Windows node cannot see ext4 on a whole disk
		{"luks2:ext4", "ntfs", true},
		{"block", "ntfs", true},
		{"xfs", "ext4", true},
		{"luks2:ext4", "ext4", true},
		{"ext4", "luks2:ext4", true},
		{"luks2:block", "luks2:ext4", false},
	}
	for _, tc := range tests {
		err := checkSourceLayout(contentSource{what: "snapshot snap-1", layout: tc.source}, tc.layout)
		if got := err != nil; got != tc.refused {
			t.Errorf("source %q into %q: %v, want refused %v", tc.source, tc.layout, err, tc.refused)
		}
		if err != nil {
			wantCode(t, err, codes.InvalidArgument, tc.source)
		}
	}
}

// TestRestoreIntoAnotherLayoutRefused: the controller records what a volume
// was made for, its snapshots carry it, and a restore or clone into a class
// of another filesystem is refused before anything is created — the case of
// a Linux volume's snapshot restored into a Windows class, whose node would
// format NTFS over the filesystem it cannot see.
func TestRestoreIntoAnotherLayoutRefused(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	src := h.createVolume(t, createReq("pvc-linux", 2, ""))
	if got := h.volume(t, src.VolumeId).Tags[testDriverName+"/layout"]; got != "ext4" {
		t.Fatalf("the volume's layout tag is %q, want ext4", got)
	}
	snap := h.snapshot(t, "snap-linux", src.VolumeId, nil)
	fromSnapshot := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.SnapshotId}}}
	fromVolume := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src.VolumeId}}}
	before := len(h.volumes())
	for name, c := range map[string]struct {
		source *csi.VolumeContentSource
		cap    *csi.VolumeCapability
		params map[string]string
	}{
		"snapshot into ntfs":       {fromSnapshot, mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ntfs"), nil},
		"clone into xfs":           {fromVolume, mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "xfs"), nil},
		"snapshot into luks2 ext4": {fromSnapshot, rwo, map[string]string{"nodeEncryption": "luks2"}},
	} {
		req := withParams(createReq("pvc-"+name, 2, ""), c.params)
		req.VolumeCapabilities, req.VolumeContentSource = []*csi.VolumeCapability{c.cap}, c.source
		_, err := h.svc.CreateVolume(h.ctx(), req)
		wantCode(t, err, codes.InvalidArgument, `made as "ext4"`)
	}
	if after := len(h.volumes()); after != before {
		t.Fatalf("%d volumes were created by refused requests", after-before)
	}
	same := createReq("pvc-same", 2, "")
	same.VolumeContentSource = fromSnapshot
	if got := h.volume(t, h.createVolume(t, same).VolumeId).Tags[testDriverName+"/layout"]; got != "ext4" {
		t.Fatalf("the restored volume's layout tag is %q, want ext4", got)
	}
}
