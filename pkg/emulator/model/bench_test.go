package model

import (
	"fmt"
	"testing"
)

// BenchmarkCloudAtScale measures the calls a driver makes most against a
// cloud that already holds many volumes, with and without saving the state
// to disk after every change.
func BenchmarkCloudAtScale(b *testing.B) {
	for _, existing := range []int{100, 2000} {
		for _, persist := range []bool{false, true} {
			b.Run(fmt.Sprintf("volumes=%d/persist=%v", existing, persist), func(b *testing.B) {
				cfg := Config{Store: newFakeStore(), ModificationsPerDay: -1}
				if persist {
					cfg.DataDir = b.TempDir()
				}
				c, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close() })
				in, _, _ := c.LocalInstance()
				var last Volume
				for range existing {
					if last, err = c.CreateVolume(CreateVolumeInput{Zone: in.Zone, Size: 1}); err != nil {
						b.Fatal(err)
					}
				}
				b.Run("CreateVolume", func(b *testing.B) {
					for b.Loop() {
						if _, err := c.CreateVolume(CreateVolumeInput{Zone: in.Zone, Size: 1}); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run("DescribeVolumes by ID", func(b *testing.B) {
					for b.Loop() {
						if _, err := c.DescribeVolumes(Query{IDs: []string{last.ID}}); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}
