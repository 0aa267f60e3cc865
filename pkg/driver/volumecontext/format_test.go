package volumecontext

import (
	"reflect"
	"strings"
	"testing"
)

func TestNormalizeFSType(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "", want: "ext4"},
		{in: "ext4", want: "ext4"},
		{in: "EXT3", want: "ext3"},
		{in: " xfs ", want: "xfs"},
		{in: "btrfs", wantErr: true},
		{in: "NTFS", want: "ntfs"},
		{in: "vfat", wantErr: true},
	}
	for _, tc := range tests {
		got, err := NormalizeFSType(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("NormalizeFSType(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseFormatOptions(t *testing.T) {
	tests := []struct {
		name    string
		params  map[string]string
		fsType  string
		want    FormatOptions
		wantErr string // a substring of the error; empty means success
	}{
		{name: "nothing set", params: map[string]string{"type": "gp3"}, want: FormatOptions{}},
		{name: "nil map", params: nil, fsType: "xfs", want: FormatOptions{}},
		{
			name: "every ext4 option",
			params: map[string]string{
				"blockSize": "4096", "inodeSize": "256", "bytesPerInode": "16384",
				"numberOfInodes": "1000", "ext4BigAlloc": "true", "ext4ClusterSize": "65536",
			},
			fsType: "ext4",
			want: FormatOptions{BlockSize: 4096, InodeSize: 256, BytesPerInode: 16384, NumberOfInodes: 1000,
				Ext4BigAlloc: true, Ext4ClusterSize: 65536},
		},
		{name: "keys match without case", params: map[string]string{"BLOCKSIZE": "2048", "InodeSize": "512"}, fsType: "xfs",
			want: FormatOptions{BlockSize: 2048, InodeSize: 512}},
		{name: "default fs is ext4", params: map[string]string{"bytesPerInode": "8192"}, want: FormatOptions{BytesPerInode: 8192}},
		{name: "bigalloc false is accepted", params: map[string]string{"ext4BigAlloc": "false"}, fsType: "ext4", want: FormatOptions{}},
		{name: "ext3 inode options", params: map[string]string{"numberOfInodes": "42"}, fsType: "ext3", want: FormatOptions{NumberOfInodes: 42}},

		{name: "unsupported fs", params: map[string]string{}, fsType: "btrfs", wantErr: "not supported"},
		{name: "block size not a number", params: map[string]string{"blockSize": "4k"}, wantErr: "blockSize: want a whole number"},
		{name: "block size not power of two", params: map[string]string{"blockSize": "3000"}, wantErr: "power of two"},
		{name: "block size too small", params: map[string]string{"blockSize": "512"}, wantErr: "from 1024 to 65536"},
		{name: "negative", params: map[string]string{"inodeSize": "-256"}, wantErr: "inodeSize"},
		{name: "xfs inode too big", params: map[string]string{"inodeSize": "4096"}, fsType: "xfs", wantErr: "from 256 to 2048"},
		{name: "inode larger than block", params: map[string]string{"inodeSize": "4096", "blockSize": "1024"}, wantErr: "must not be larger"},
		{name: "bytes per inode on xfs", params: map[string]string{"bytesPerInode": "8192"}, fsType: "xfs", wantErr: "bytesPerInode cannot be used with filesystem type xfs"},
		{name: "inode count on xfs", params: map[string]string{"numberOfInodes": "8192"}, fsType: "xfs", wantErr: "numberOfInodes cannot be used"},
		{name: "bigalloc on ext3", params: map[string]string{"ext4BigAlloc": "true"}, fsType: "ext3", wantErr: "ext4BigAlloc cannot be used with filesystem type ext3"},
		{name: "block size on ntfs", params: map[string]string{"blockSize": "4096"}, fsType: "ntfs", wantErr: "blockSize cannot be used with filesystem type ntfs"},
		{name: "ntfs without options", params: map[string]string{"type": "gp3"}, fsType: "ntfs", want: FormatOptions{}},
		{name: "bigalloc on xfs", params: map[string]string{"ext4BigAlloc": "true"}, fsType: "xfs", wantErr: "cannot be used"},
		{name: "bigalloc not a bool", params: map[string]string{"ext4BigAlloc": "yes please"}, wantErr: "want true or false"},
		{name: "cluster size without bigalloc", params: map[string]string{"ext4ClusterSize": "16384"}, wantErr: "needs ext4BigAlloc=true"},
		{name: "cluster smaller than block", params: map[string]string{"ext4BigAlloc": "true", "ext4ClusterSize": "2048", "blockSize": "4096"}, wantErr: "must not be smaller"},
		{name: "inode count zero", params: map[string]string{"numberOfInodes": "0"}, wantErr: "numberOfInodes"},
		{name: "inode count overflows 32 bits", params: map[string]string{"numberOfInodes": "4294967296"}, wantErr: "numberOfInodes"},
		{name: "same key twice", params: map[string]string{"blockSize": "4096", "blocksize": "1024"}, wantErr: "more than once"},
		{name: "shell metacharacters", params: map[string]string{"blockSize": "4096; rm -rf /"}, wantErr: "blockSize"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFormatOptions(tc.params, tc.fsType)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				if got != (FormatOptions{}) {
					t.Fatalf("options = %+v on error, want zero", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMkfsArgs(t *testing.T) {
	all := FormatOptions{BlockSize: 4096, InodeSize: 512, BytesPerInode: 16384, NumberOfInodes: 100,
		Ext4BigAlloc: true, Ext4ClusterSize: 65536}
	tests := []struct {
		name   string
		opts   FormatOptions
		fsType string
		want   []string
	}{
		{name: "none", opts: FormatOptions{}, fsType: "ext4", want: nil},
		{name: "ext4 all", opts: all, fsType: "ext4",
			want: []string{"-b", "4096", "-I", "512", "-i", "16384", "-N", "100", "-O", "bigalloc", "-C", "65536"}},
		{name: "ext3 sizes", opts: FormatOptions{BlockSize: 1024, InodeSize: 128}, fsType: "ext3",
			want: []string{"-b", "1024", "-I", "128"}},
		{name: "xfs", opts: FormatOptions{BlockSize: 4096, InodeSize: 512}, fsType: "xfs",
			want: []string{"-b", "size=4096", "-i", "size=512"}},
		{name: "unknown fs", opts: all, fsType: "vfat", want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.opts.MkfsArgs(tc.fsType); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("MkfsArgs(%s) = %q, want %q", tc.fsType, got, tc.want)
			}
		})
	}
}

// TestVolumeContextRoundTrip checks that what the controller writes is what
// the node reads back.
func TestVolumeContextRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		fsType string
		opts   FormatOptions
	}{
		{fsType: "ext4", opts: FormatOptions{BlockSize: 2048, InodeSize: 256, NumberOfInodes: 7, Ext4BigAlloc: true, Ext4ClusterSize: 32768}},
		{fsType: "xfs", opts: FormatOptions{BlockSize: 4096, InodeSize: 1024}},
		{fsType: "ext3", opts: FormatOptions{}},
	} {
		vc := tc.opts.VolumeContext()
		got, err := ParseFormatOptions(vc, tc.fsType)
		if err != nil {
			t.Fatalf("%s: parse %v: %v", tc.fsType, vc, err)
		}
		if got != tc.opts {
			t.Fatalf("%s: round trip %+v -> %v -> %+v", tc.fsType, tc.opts, vc, got)
		}
	}
	if vc := (FormatOptions{}).VolumeContext(); len(vc) != 0 {
		t.Fatalf("zero options should write nothing, got %v", vc)
	}
}
