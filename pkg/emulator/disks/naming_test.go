package disks

import (
	"maps"
	"slices"
	"testing"
)

func TestLinkName(t *testing.T) {
	tests := []struct {
		volumeID string
		want     string
	}{
		{volumeID: "vol-0123456789abcdef0", want: "nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0"},
		{volumeID: "vol-1a2b3c4d", want: "nvme-Amazon_Elastic_Block_Store_vol1a2b3c4d"},
	}
	for _, tc := range tests {
		t.Run(tc.volumeID, func(t *testing.T) {
			if got := LinkName(tc.volumeID); got != tc.want {
				t.Fatalf("LinkName(%q) = %q, want %q", tc.volumeID, got, tc.want)
			}
		})
	}
}

func TestValidation(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		wantErr bool
	}{
		{name: "volume ID", err: validateVolumeID("vol-0123456789abcdef0")},
		{name: "short volume ID", err: validateVolumeID("vol-1a2b3c4d")},
		{name: "volume ID with a path", err: validateVolumeID("vol-1/../../etc"), wantErr: true},
		{name: "volume ID with a dot", err: validateVolumeID("vol-1.img"), wantErr: true},
		{name: "empty volume ID", err: validateVolumeID(""), wantErr: true},
		{name: "bare prefix", err: validateVolumeID("vol-"), wantErr: true},
		{name: "snapshot ID as volume ID", err: validateVolumeID("snap-1a2b3c4d"), wantErr: true},
		{name: "snapshot ID", err: validateSnapshotID("snap-0123456789abcdef0")},
		{name: "volume ID as snapshot ID", err: validateSnapshotID("vol-0123456789abcdef0"), wantErr: true},
		{name: "snapshot ID with a slash", err: validateSnapshotID("snap-1/x"), wantErr: true},
		{name: "1 GiB", err: validateSize(1 << 30)},
		{name: "one sector", err: validateSize(512)},
		{name: "zero size", err: validateSize(0), wantErr: true},
		{name: "negative size", err: validateSize(-512), wantErr: true},
		{name: "partial sector", err: validateSize(1000), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if (tc.err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error: %v", tc.err, tc.wantErr)
			}
		})
	}
}

func TestKnownImageIDs(t *testing.T) {
	tests := []struct {
		name    string
		ids     []string
		want    []string
		wantErr bool
	}{
		{name: "none", ids: nil, want: []string{}},
		{name: "volumes and snapshots", ids: []string{"vol-1a", "snap-2b", "vol-1a"}, want: []string{"snap-2b", "vol-1a"}},
		{name: "an instance ID", ids: []string{"vol-1a", "i-0123"}, wantErr: true},
		{name: "a path", ids: []string{"snap-1/../../x"}, wantErr: true},
		{name: "an image name", ids: []string{"vol-1a.img"}, wantErr: true},
		{name: "empty", ids: []string{""}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			known, err := knownImageIDs(tc.ids)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error: %v", err, tc.wantErr)
			}
			if tc.wantErr {
				if known != nil {
					t.Fatalf("a failed call returned IDs %v", known)
				}
				return
			}
			if got := slices.Sorted(maps.Keys(known)); !slices.Equal(got, tc.want) {
				t.Fatalf("known = %v, want %v", got, tc.want)
			}
		})
	}
}
