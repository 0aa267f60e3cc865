package ec2api_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// TestStatesTakeTheirTime drives every volume and attachment state through
// the SDK and its waiters with EC2-like (but short) latencies.
func TestStatesTakeTheirTime(t *testing.T) {
	lat := 150 * time.Millisecond
	f := newFixture(t, emulatortest.Options{Latencies: model.Latencies{VolumeCreate: lat, VolumeDelete: lat, Attach: lat, Detach: lat}})
	out, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	id := out.VolumeId
	fast := func(o *ec2.VolumeAvailableWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 50*time.Millisecond
	}
	if err := ec2.NewVolumeAvailableWaiter(f.client, fast).Wait(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{*id}}, time.Minute); err != nil {
		t.Fatal(err)
	}

	a, err := f.client.AttachVolume(f.ctx, &ec2.AttachVolumeInput{VolumeId: id, InstanceId: aws.String(f.local), Device: aws.String("/dev/sdf")})
	if err != nil || a.State != types.VolumeAttachmentStateAttaching {
		t.Fatalf("attach: %+v, %v", a, err)
	}
	if got := f.get(t, *id); got.State != types.VolumeStateInUse {
		t.Fatalf("an attaching volume is %s, want in-use", got.State)
	}
	inUse := func(o *ec2.VolumeInUseWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 50*time.Millisecond
	}
	if err := ec2.NewVolumeInUseWaiter(f.client, inUse).Wait(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{*id}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	f.waitAttachment(t, *id, f.local, types.VolumeAttachmentStateAttached)

	d, err := f.client.DetachVolume(f.ctx, &ec2.DetachVolumeInput{VolumeId: id})
	if err != nil || d.State != types.VolumeAttachmentStateDetaching {
		t.Fatalf("detach: %+v, %v", d, err)
	}
	if err := ec2.NewVolumeAvailableWaiter(f.client, fast).Wait(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{*id}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.DeleteVolume(f.ctx, &ec2.DeleteVolumeInput{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
	deleted := func(o *ec2.VolumeDeletedWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 50*time.Millisecond
	}
	if err := ec2.NewVolumeDeletedWaiter(f.client, deleted).Wait(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{*id}}, time.Minute); err != nil {
		t.Fatal(err)
	}
}

func TestCreatingVolumeRefusesUse(t *testing.T) {
	f := newFixture(t, emulatortest.Options{Latencies: model.Latencies{VolumeCreate: time.Hour}})
	out, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
	}{
		{name: "attach", call: func() error {
			_, err := f.client.AttachVolume(f.ctx, &ec2.AttachVolumeInput{VolumeId: out.VolumeId, InstanceId: aws.String(f.local), Device: aws.String("/dev/sdf")})
			return err
		}},
		{name: "delete", call: func() error {
			_, err := f.client.DeleteVolume(f.ctx, &ec2.DeleteVolumeInput{VolumeId: out.VolumeId})
			return err
		}},
		{name: "snapshot", call: func() error {
			_, err := f.client.CreateSnapshot(f.ctx, &ec2.CreateSnapshotInput{VolumeId: out.VolumeId})
			return err
		}},
		{name: "modify", call: func() error {
			_, err := f.client.ModifyVolume(f.ctx, &ec2.ModifyVolumeInput{VolumeId: out.VolumeId, Size: aws.Int32(2)})
			return err
		}},
		{name: "copy", call: func() error {
			_, err := f.client.CopyVolumes(f.ctx, &ec2.CopyVolumesInput{SourceVolumeId: out.VolumeId})
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := apiCode(tc.call()); got != "IncorrectState" {
				t.Fatalf("%s of a creating volume: %q, want IncorrectState", tc.name, got)
			}
		})
	}
}
