package cloud

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// benchActions are the EC2 actions a volume's lifecycle uses.
var (
	benchMutating = []string{"CreateVolume", "AttachVolume", "DetachVolume", "DeleteVolume"}
	benchDescribe = []string{"DescribeVolumes", "DescribeInstances", "DescribeAvailabilityZones", "DescribeVolumesModifications", "DescribeSnapshots"}
)

// volumesPerInstance keeps every instance well below its attachment limit.
const volumesPerInstance = 20

// BenchmarkVolumeLifecycle runs create → attach → detach → delete for 1, 50
// and 500 volumes at once against the emulator without devices, with
// EC2-like state-change latencies (2s to create, attach, detach, delete)
// and 50ms per API request, using the production configuration (batching
// and polling defaults). It reports EC2 calls and wall time per volume.
//
//	go test -run '^$' -bench VolumeLifecycle -benchtime 1x ./pkg/cloud/
func BenchmarkVolumeLifecycle(b *testing.B) {
	for _, volumes := range []int{1, 50, 500} {
		b.Run(fmt.Sprintf("volumes=%d", volumes), func(b *testing.B) {
			instances := make([]model.InstanceSpec, (volumes+volumesPerInstance-1)/volumesPerInstance)
			for i := range instances {
				instances[i] = model.InstanceSpec{ID: fmt.Sprintf("i-%017x", i+1), Type: "m7i.large", Zone: "us-east-1a", Local: i == 0}
			}
			env := emulatortest.Start(b, emulatortest.Options{
				Instances:           instances,
				Latencies:           model.DefaultLatencies(),
				ModificationsPerDay: -1,
				Faults:              faults.Config{Latency: map[string]faults.Duration{"*": faults.Duration(50 * time.Millisecond)}},
			})
			c := newCloud(b, env, Config{})
			count := func(actions []string) int {
				n := 0
				for _, a := range actions {
					n += env.Calls(a)
				}
				return n
			}
			mutatingBefore, describeBefore := count(benchMutating), count(benchDescribe)
			b.ResetTimer()
			start := time.Now()
			for iter := range b.N {
				var wg sync.WaitGroup
				for i := range volumes {
					wg.Add(1)
					go func() {
						defer wg.Done()
						volumeLifecycle(b, c, fmt.Sprintf("bench-%d-%d", iter, i), instances[i/volumesPerInstance].ID)
					}()
				}
				wg.Wait()
			}
			wall := time.Since(start)
			b.StopTimer()
			perVolume := float64(b.N * volumes)
			mutating := float64(count(benchMutating) - mutatingBefore)
			describe := float64(count(benchDescribe) - describeBefore)
			b.ReportMetric((mutating+describe)/perVolume, "ec2-calls/volume")
			b.ReportMetric(mutating/perVolume, "mutating-calls/volume")
			b.ReportMetric(describe/perVolume, "describe-calls/volume")
			b.ReportMetric(wall.Seconds()/perVolume, "wall-s/volume")
		})
	}
}

// volumeLifecycle creates, attaches, detaches and deletes one volume.
func volumeLifecycle(b *testing.B, c Cloud, name, instanceID string) {
	ctx := testContext(b)
	v, err := c.CreateVolume(ctx, name, &CreateVolumeOptions{SizeGiB: 1, Zone: "us-east-1a"})
	if err != nil {
		b.Error(err)
		return
	}
	if _, err := c.AttachVolume(ctx, v.ID, instanceID, AttachOptions{}); err != nil {
		b.Error(err)
		return
	}
	if err := c.DetachVolume(ctx, v.ID, instanceID); err != nil {
		b.Error(err)
		return
	}
	if err := c.DeleteVolume(ctx, v.ID); err != nil {
		b.Error(err)
	}
}
