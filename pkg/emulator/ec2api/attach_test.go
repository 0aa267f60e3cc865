package ec2api_test

import (
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

const (
	otherZoneInstance = "i-0b0000000000000b1"
	sameZoneInstance  = "i-0a0000000000000a2"
	xenInstance       = "i-0a0000000000000a3"
)

// attachFixture has the local m5.large in us-east-1a, another Nitro
// instance in the same zone, one in us-east-1b and a Xen one.
func attachFixture(t *testing.T) *fixture {
	return newFixture(t, emulatortest.Options{Instances: []model.InstanceSpec{
		{Type: "m5.large", Zone: "us-east-1a", Local: true},
		{ID: sameZoneInstance, Type: "m6i.large", Zone: "us-east-1a"},
		{ID: otherZoneInstance, Type: "m5.large", Zone: "us-east-1b"},
		{ID: xenInstance, Type: "t2.medium", Zone: "us-east-1a"},
	}})
}

func TestAttachVolumeRules(t *testing.T) {
	f := attachFixture(t)
	free := f.volume(t, 1)
	used := f.volume(t, 1)
	f.attach(t, used, f.local, "/dev/xvdba")
	multi, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(4),
		VolumeType: types.VolumeTypeIo2, Iops: aws.Int32(100), MultiAttachEnabled: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	multiID := aws.ToString(multi.VolumeId)
	f.attach(t, multiID, f.local, "/dev/xvdbb")

	tests := []struct {
		name     string
		volume   string
		instance string
		device   string
		dry      bool
		want     string
	}{
		{name: "unknown volume", volume: "vol-0123456789abcdef0", instance: f.local, device: "/dev/xvdbc", want: "InvalidVolume.NotFound"},
		{name: "malformed volume", volume: "vol-1", instance: f.local, device: "/dev/xvdbc", want: "InvalidVolumeID.Malformed"},
		{name: "unknown instance", volume: free, instance: "i-0123456789abcdef0", device: "/dev/xvdbc", want: "InvalidInstanceID.NotFound"},
		{name: "malformed instance", volume: free, instance: "instance-1", device: "/dev/xvdbc", want: "InvalidInstanceID.Malformed"},
		{name: "bad device name", volume: free, instance: f.local, device: "/dev/nvme1n1", want: "InvalidParameterValue"},
		{name: "device taken", volume: free, instance: f.local, device: "/dev/xvdba", want: "InvalidParameterValue"},
		{name: "root device taken", volume: free, instance: f.local, device: "/dev/xvda", want: "InvalidParameterValue"},
		{name: "other zone", volume: free, instance: otherZoneInstance, device: "/dev/xvdbc", want: "InvalidVolume.ZoneMismatch"},
		{name: "attached to this instance", volume: used, instance: f.local, device: "/dev/xvdbc", want: "VolumeInUse"},
		{name: "attached elsewhere", volume: used, instance: sameZoneInstance, device: "/dev/xvdbc", want: "VolumeInUse"},
		{name: "multi-attach to a Xen instance", volume: multiID, instance: xenInstance, device: "/dev/xvdbc", want: "InvalidParameterCombination"},
		{name: "dry run", volume: free, instance: f.local, device: "/dev/xvdbc", dry: true, want: "DryRunOperation"},
		{name: "multi-attach to a second instance", volume: multiID, instance: sameZoneInstance, device: "/dev/xvdbc"},
		{name: "Windows style device name", volume: free, instance: f.local, device: "xvdf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := f.client.AttachVolume(f.ctx, &ec2.AttachVolumeInput{VolumeId: aws.String(tc.volume), InstanceId: aws.String(tc.instance),
				Device: aws.String(tc.device), DryRun: aws.Bool(tc.dry)})
			if got := apiCode(err); got != tc.want {
				t.Fatalf("AttachVolume: %v, want %q", err, tc.want)
			}
			if err == nil && (out.State != types.VolumeAttachmentStateAttaching || aws.ToString(out.Device) != tc.device) {
				t.Fatalf("AttachVolume answered %+v", out)
			}
		})
	}
	if got := f.get(t, multiID); len(got.Attachments) != 2 {
		t.Fatalf("multi-attach volume has %d attachments, want 2", len(got.Attachments))
	}
}

func TestAttachmentLimits(t *testing.T) {
	tests := []struct {
		typ  string
		enis int
		// want is how many volumes attach besides the root volume.
		want int
	}{
		{typ: "m5.large", enis: 1, want: 26},  // 28 shared slots - root - 1 ENI
		{typ: "m5.large", enis: 3, want: 24},  // each ENI takes a slot
		{typ: "m5d.large", enis: 1, want: 25}, // so does the NVMe instance-store disk
		{typ: "m7i.large", enis: 3, want: 31}, // 32 dedicated slots, ENIs do not count
		{typ: "t2.medium", enis: 1, want: 38}, // Xen: 39 names
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s with %d ENIs", tc.typ, tc.enis), func(t *testing.T) {
			f := newFixture(t, emulatortest.Options{Instances: []model.InstanceSpec{{Type: tc.typ, NetworkInterfaces: tc.enis}}})
			for i := 0; ; i++ {
				id := f.volume(t, 1)
				device := fmt.Sprintf("/dev/xvd%c%c", 'b'+i/26, 'a'+i%26)
				_, err := f.client.AttachVolume(f.ctx, &ec2.AttachVolumeInput{VolumeId: aws.String(id), InstanceId: aws.String(f.local), Device: aws.String(device)})
				if err != nil {
					if apiCode(err) != "AttachmentLimitExceeded" || i != tc.want {
						t.Fatalf("attachment %d failed with %v; want AttachmentLimitExceeded after %d", i+1, err, tc.want)
					}
					return
				}
				if i > tc.want {
					t.Fatalf("attached %d volumes, the limit is %d", i+1, tc.want)
				}
			}
		})
	}
}

func TestDetachVolumeRules(t *testing.T) {
	f := attachFixture(t)
	free := f.volume(t, 1)
	used := f.volume(t, 1)
	f.attach(t, used, f.local, "/dev/xvdba")
	var root string
	for _, v := range f.env.Cloud().Volumes() {
		if v.Root && v.Attachments[0].InstanceID == f.local {
			root = v.ID
		}
	}
	tests := []struct {
		name string
		in   ec2.DetachVolumeInput
		want string
	}{
		{name: "not attached", in: ec2.DetachVolumeInput{VolumeId: aws.String(free)}, want: "IncorrectState"},
		{name: "unknown volume", in: ec2.DetachVolumeInput{VolumeId: aws.String("vol-0123456789abcdef0")}, want: "InvalidVolume.NotFound"},
		{name: "other instance", in: ec2.DetachVolumeInput{VolumeId: aws.String(used), InstanceId: aws.String(sameZoneInstance)}, want: "InvalidAttachment.NotFound"},
		{name: "other device", in: ec2.DetachVolumeInput{VolumeId: aws.String(used), Device: aws.String("/dev/xvdbz")}, want: "InvalidAttachment.NotFound"},
		{name: "unknown instance", in: ec2.DetachVolumeInput{VolumeId: aws.String(used), InstanceId: aws.String("i-0123456789abcdef0")}, want: "InvalidInstanceID.NotFound"},
		{name: "root volume", in: ec2.DetachVolumeInput{VolumeId: aws.String(root)}, want: "IncorrectState"},
		{name: "dry run", in: ec2.DetachVolumeInput{VolumeId: aws.String(used), DryRun: aws.Bool(true)}, want: "DryRunOperation"},
		{name: "detach", in: ec2.DetachVolumeInput{VolumeId: aws.String(used), InstanceId: aws.String(f.local), Device: aws.String("/dev/xvdba")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := f.client.DetachVolume(f.ctx, &tc.in)
			if got := apiCode(err); got != tc.want {
				t.Fatalf("DetachVolume: %v, want %q", err, tc.want)
			}
			if err == nil && out.State != types.VolumeAttachmentStateDetaching {
				t.Fatalf("DetachVolume answered %s", out.State)
			}
		})
	}
	f.waitAttachment(t, used, f.local, types.VolumeAttachmentStateDetached)
	if got := f.get(t, used); got.State != types.VolumeStateAvailable {
		t.Fatalf("detached volume is %s", got.State)
	}
}

func TestMultiAttachDetachNeedsInstance(t *testing.T) {
	f := attachFixture(t)
	out, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(4),
		VolumeType: types.VolumeTypeIo1, Iops: aws.Int32(100), MultiAttachEnabled: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.VolumeId)
	f.attach(t, id, f.local, "/dev/sdf")
	f.attach(t, id, sameZoneInstance, "/dev/sdf")
	if _, err := f.client.DetachVolume(f.ctx, &ec2.DetachVolumeInput{VolumeId: aws.String(id)}); apiCode(err) != "InvalidParameterCombination" {
		t.Fatalf("detach of a multi-attached volume without an instance: %v", err)
	}
	if _, err := f.client.DetachVolume(f.ctx, &ec2.DetachVolumeInput{VolumeId: aws.String(id), InstanceId: aws.String(sameZoneInstance)}); err != nil {
		t.Fatal(err)
	}
	f.waitAttachment(t, id, sameZoneInstance, types.VolumeAttachmentStateDetached)
	if got := f.get(t, id); got.State != types.VolumeStateInUse || len(got.Attachments) != 1 {
		t.Fatalf("after one detach: %s with %d attachments", got.State, len(got.Attachments))
	}
}

func TestDescribeInstancesShowsAttachments(t *testing.T) {
	f := attachFixture(t)
	id := f.volume(t, 1)
	f.attach(t, id, f.local, "/dev/xvdbq")
	out, err := f.client.DescribeInstances(f.ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{f.local}})
	if err != nil {
		t.Fatal(err)
	}
	in := out.Reservations[0].Instances[0]
	if len(in.BlockDeviceMappings) != 2 || aws.ToString(in.BlockDeviceMappings[0].DeviceName) != "/dev/xvda" ||
		aws.ToString(in.BlockDeviceMappings[1].DeviceName) != "/dev/xvdbq" || aws.ToString(in.BlockDeviceMappings[1].Ebs.VolumeId) != id {
		t.Fatalf("block devices %+v", in.BlockDeviceMappings)
	}
	if in.InstanceType != "m5.large" || aws.ToString(in.Placement.AvailabilityZone) != "us-east-1a" || in.State.Name != types.InstanceStateNameRunning ||
		len(in.NetworkInterfaces) != 1 || aws.ToString(in.PrivateIpAddress) == "" || aws.ToString(in.RootDeviceName) != "/dev/xvda" {
		t.Fatalf("instance %+v", in)
	}
	tests := []struct {
		name    string
		in      ec2.DescribeInstancesInput
		want    int
		wantErr string
	}{
		{name: "all", in: ec2.DescribeInstancesInput{}, want: 4},
		{name: "by zone", in: ec2.DescribeInstancesInput{Filters: []types.Filter{filter("availability-zone", "us-east-1b")}}, want: 1},
		{name: "by type", in: ec2.DescribeInstancesInput{Filters: []types.Filter{filter("instance-type", "m5.large")}}, want: 2},
		{name: "by attached volume", in: ec2.DescribeInstancesInput{Filters: []types.Filter{filter("block-device-mapping.volume-id", id)}}, want: 1},
		{name: "unknown ID", in: ec2.DescribeInstancesInput{InstanceIds: []string{"i-0123456789abcdef0"}}, wantErr: "InvalidInstanceID.NotFound"},
		{name: "malformed ID", in: ec2.DescribeInstancesInput{InstanceIds: []string{"i-xyz"}}, wantErr: "InvalidInstanceID.Malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := f.client.DescribeInstances(f.ctx, &tc.in)
			if got := apiCode(err); got != tc.wantErr {
				t.Fatalf("DescribeInstances: %v, want %q", err, tc.wantErr)
			}
			if err == nil && len(out.Reservations) != tc.want {
				t.Fatalf("%d instances, want %d", len(out.Reservations), tc.want)
			}
		})
	}
}
