package cloud

import (
	"errors"
	"testing"
)

func TestVolumeIOPS(t *testing.T) {
	tests := []struct {
		name    string
		opts    CreateVolumeOptions
		want    int32
		wantErr bool
	}{
		{"nothing asked: the type's default", CreateVolumeOptions{SizeGiB: 10}, 0, false},
		{"explicit gp3 IOPS pass through", CreateVolumeOptions{SizeGiB: 10, IOPS: 4000}, 4000, false},
		{"explicit IOPS capped to the type's maximum", CreateVolumeOptions{SizeGiB: 1000, Type: VolumeTypeIO1, IOPS: 100000}, 64000, false},
		{"explicit IOPS below minimum left to EC2 to refuse", CreateVolumeOptions{SizeGiB: 10, Type: VolumeTypeIO2, IOPS: 50}, 50, false},
		{"per GiB times size", CreateVolumeOptions{SizeGiB: 100, Type: VolumeTypeIO1, IOPSPerGiB: 20}, 2000, false},
		{"per GiB capped to the ratio EC2 accepts", CreateVolumeOptions{SizeGiB: 10, Type: VolumeTypeIO1, IOPSPerGiB: 80}, 500, false},
		{"per GiB capped to the maximum", CreateVolumeOptions{SizeGiB: 2000, Type: VolumeTypeIO2, IOPSPerGiB: 500}, 256000, false},
		{"per GiB on gp3 by default type", CreateVolumeOptions{SizeGiB: 100, IOPSPerGiB: 50}, 5000, false},
		{"per GiB below minimum refused", CreateVolumeOptions{SizeGiB: 10, Type: VolumeTypeGP3, IOPSPerGiB: 100}, 0, true},
		{"per GiB below minimum raised when allowed", CreateVolumeOptions{SizeGiB: 10, Type: VolumeTypeGP3, IOPSPerGiB: 100, AllowIOPSPerGiBIncrease: true}, 3000, false},
		{"io2 raised to its own minimum", CreateVolumeOptions{SizeGiB: 4, Type: VolumeTypeIO2, IOPSPerGiB: 10, AllowIOPSPerGiBIncrease: true}, 100, false},
		{"no overflow on huge requests", CreateVolumeOptions{SizeGiB: 65536, Type: VolumeTypeIO2, IOPSPerGiB: 1 << 30}, 256000, false},
		{"both IOPS and per GiB", CreateVolumeOptions{SizeGiB: 10, IOPS: 3000, IOPSPerGiB: 10}, 0, true},
		{"gp2 takes no IOPS", CreateVolumeOptions{SizeGiB: 10, Type: VolumeTypeGP2, IOPS: 3000}, 0, true},
		{"st1 takes no IOPS per GiB", CreateVolumeOptions{SizeGiB: 500, Type: VolumeTypeST1, IOPSPerGiB: 3}, 0, true},
		{"negative IOPS", CreateVolumeOptions{SizeGiB: 10, IOPS: -1}, 0, true},
		{"per GiB without a size", CreateVolumeOptions{Type: VolumeTypeIO1, IOPSPerGiB: 10}, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := volumeIOPS(&tc.opts)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidArgument) {
					t.Fatalf("err = %v, want ErrInvalidArgument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %d IOPS, want %d", got, tc.want)
			}
		})
	}
}
