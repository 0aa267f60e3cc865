package disks

import (
	"errors"
	"strings"
	"testing"
)

func TestStateOnlyStore(t *testing.T) {
	s := NewStateOnlyStore()
	const vol, vol2, snap = "vol-0123456789abcdef0", "vol-1a2b3c4d", "snap-0123456789abcdef0"
	attach := func(id string) error {
		dev, err := s.Attach(id)
		if dev != "" {
			return errors.New("state-only Attach returned a device: " + dev)
		}
		return err
	}
	// The store holds no images, so none is ever unknown or removed.
	noImages := func(ids []string, err error) error {
		if len(ids) != 0 {
			return errors.New("state-only store reported images: " + strings.Join(ids, ","))
		}
		return err
	}
	tests := []struct {
		name    string
		call    func() error
		wantErr bool
	}{
		{name: "create", call: func() error { return s.CreateVolume(vol, 1<<30) }},
		{name: "create again", call: func() error { return s.CreateVolume(vol, 1<<30) }},
		{name: "create with bad size", call: func() error { return s.CreateVolume(vol, 100) }, wantErr: true},
		{name: "create with bad ID", call: func() error { return s.CreateVolume("vol-../x", 1<<30) }, wantErr: true},
		{name: "restore", call: func() error { return s.CreateVolumeFromSnapshot(vol2, snap, 1<<30) }},
		{name: "restore with bad snapshot ID", call: func() error { return s.CreateVolumeFromSnapshot(vol2, vol, 1<<30) }, wantErr: true},
		{name: "clone", call: func() error { return s.CloneVolume(vol2, vol, 2<<30) }},
		{name: "clone with bad source", call: func() error { return s.CloneVolume(vol2, snap, 2<<30) }, wantErr: true},
		{name: "resize", call: func() error { return s.ResizeVolume(vol, 2<<30) }},
		{name: "resize with bad size", call: func() error { return s.ResizeVolume(vol, 0) }, wantErr: true},
		{name: "snapshot", call: func() error { return s.CreateSnapshot(snap, vol) }},
		{name: "snapshot with swapped IDs", call: func() error { return s.CreateSnapshot(vol, snap) }, wantErr: true},
		{name: "attach", call: func() error { return attach(vol) }},
		{name: "attach bad ID", call: func() error { return attach("vol_1") }, wantErr: true},
		{name: "detach", call: func() error { return s.Detach(vol, false) }},
		{name: "force detach", call: func() error { return s.Detach(vol, true) }},
		{name: "reconcile", call: func() error { return s.Reconcile([]string{vol, vol2}) }},
		{name: "reconcile bad ID", call: func() error { return s.Reconcile([]string{vol, "x"}) }, wantErr: true},
		{name: "unknown images", call: func() error { return noImages(s.UnknownImages([]string{vol, snap})) }},
		{name: "unknown images with a bad known ID", call: func() error { return noImages(s.UnknownImages([]string{vol, "vol-../x"})) }, wantErr: true},
		{name: "remove unknown images", call: func() error { return noImages(s.RemoveUnknownImages("/nonexistent", []string{vol, snap})) }},
		{name: "remove unknown images with a bad known ID", call: func() error { return noImages(s.RemoveUnknownImages("", []string{"snap_1"})) }, wantErr: true},
		{name: "delete snapshot", call: func() error { return s.DeleteSnapshot(snap) }},
		{name: "delete volume", call: func() error { return s.DeleteVolume(vol) }},
		{name: "delete bad ID", call: func() error { return s.DeleteVolume("") }, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error: %v", err, tc.wantErr)
			}
		})
	}
}
