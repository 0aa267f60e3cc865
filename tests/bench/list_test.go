//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/container-storage-interface/spec/lib/go/csi"
)

// benchList measures ListVolumes and ControllerGetVolume over many volumes
// (P6): how many pages and EC2 calls a full listing takes, how long, and
// what it costs the controller in memory.
func benchList(t *testing.T, r *report) {
	volumes := 5000
	if *profile == "ci" {
		volumes = 1000
	}
	dir := filepath.Join(r.dir, "list")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := startEmulator(t, dir, "emulator", "--no-devices", "--data-dir=", "--zones="+zone+"=use1-az1",
		"--volume-create-latency=0s", "--instance=id=i-0000000000000001a,type=m5.large,zone="+zone+",local")
	ids := createTaggedVolumes(t, e, volumes)
	ctrl, endpoint := diskplaneController.start(t, dir, awsEnv(e), nil)
	conn := dial(t, endpoint)
	client := csi.NewControllerClient(conn)
	waitFor(t, "the controller to answer", time.Minute, func() bool {
		_, err := csi.NewIdentityClient(conn).Probe(context.Background(), &csi.ProbeRequest{})
		return err == nil
	})

	section := fmt.Sprintf("P6 %d volumes", volumes)
	for _, pageSize := range []int32{0, 100} {
		before, _ := e.calls(t)
		mem := sample(t, ctrl)
		started := time.Now()
		pages, listed, token := 0, 0, ""
		for {
			resp, err := client.ListVolumes(context.Background(), &csi.ListVolumesRequest{MaxEntries: pageSize, StartingToken: token})
			if err != nil {
				t.Fatalf("ListVolumes: %v", err)
			}
			pages++
			listed += len(resp.GetEntries())
			if token = resp.GetNextToken(); token == "" {
				break
			}
		}
		took := time.Since(started)
		u := mem.end()
		after, _ := e.calls(t)
		if listed != volumes {
			t.Errorf("ListVolumes (max_entries %d) listed %d volumes, want %d", pageSize, listed, volumes)
		}
		name := fmt.Sprintf("ListVolumes, max_entries %d", pageSize)
		note := fmt.Sprintf("%d pages, %d DescribeVolumes calls, controller peak RSS %d MiB", pages,
			after["DescribeVolumes"]-before["DescribeVolumes"], u.PeakRSSKB/1024)
		r.add(section, name+": time", took.Seconds(), 0, "s", note)
		floor := pages + (volumes+499)/500
		r.add(section, name+": EC2 calls", float64(sum(after)-sum(before)), float64(floor), "",
			"floor: a DescribeVolumes per page, and a DescribeVolumeStatus per 500 volumes for their health")
	}

	before, _ := e.calls(t)
	mem := sample(t, ctrl)
	started := time.Now()
	work := make(chan string)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for id := range work {
				if _, err := client.ControllerGetVolume(context.Background(), &csi.ControllerGetVolumeRequest{VolumeId: id}); err != nil {
					t.Errorf("ControllerGetVolume %s: %v", id, err)
				}
			}
		})
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	took := time.Since(started)
	u := mem.end()
	after, _ := e.calls(t)
	note := fmt.Sprintf("50 at a time; controller peak RSS %d MiB", u.PeakRSSKB/1024)
	r.add(section, "ControllerGetVolume of each: time", took.Seconds(), 0, "s", note)
	r.add(section, "ControllerGetVolume of each: EC2 calls", float64(sum(after)-sum(before)), float64(2*((volumes+49)/50)),
		"", "batched lookups; floor: with 50 callers at a time, a DescribeVolumes and a DescribeVolumeStatus per 50 volumes")
}

// createTaggedVolumes creates n volumes through the EC2 API as Diskplane's
// controller would have, with its cluster tag, 20 at a time.
func createTaggedVolumes(t *testing.T, e *emulator, n int) []string {
	t.Helper()
	client := ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.ec2),
		Credentials: credentials.NewStaticCredentialsProvider("bench", "bench", ""), RetryMaxAttempts: 10})
	ids := make([]string, n)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for i := range work {
				out, err := client.CreateVolume(context.Background(), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zone),
					Size: aws.Int32(1), VolumeType: types.VolumeTypeGp3, TagSpecifications: []types.TagSpecification{{
						ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{
							{Key: aws.String("CSIVolumeName"), Value: aws.String(fmt.Sprintf("pvc-bench-%d", i))},
							{Key: aws.String("ebs.csi.diskplane.io/cluster"), Value: aws.String("true")},
						}}}})
				if err != nil {
					t.Errorf("CreateVolume: %v", err)
					continue
				}
				ids[i] = aws.ToString(out.VolumeId)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return ids
}

// sum adds up calls by action.
func sum(calls map[string]int) int {
	n := 0
	for _, c := range calls {
		n += c
	}
	return n
}
