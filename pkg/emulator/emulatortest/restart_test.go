package emulatortest_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func TestRestartKeepsEverything(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{Instances: []model.InstanceSpec{{Type: "m5.large"}, {Type: "m7i.large", Zone: "us-east-1b"}}})
	client := env.EC2Client()
	ctx := t.Context()
	local := env.LocalInstance()
	vol, err := client.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(local.Zone), Size: aws.Int32(2), ClientToken: aws.String("pvc-1"),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{{Key: aws.String("CSIVolumeName"), Value: aws.String("pvc-1")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: vol.VolumeId, InstanceId: aws.String(local.ID), Device: aws.String("/dev/xvdba")}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: vol.VolumeId, Size: aws.Int32(3)}); err != nil {
		t.Fatal(err)
	}
	snap, err := client.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: vol.VolumeId})
	if err != nil {
		t.Fatal(err)
	}
	calls := env.Calls("CreateVolume")

	env.Restart(t)

	if got := env.LocalInstance(); got.ID != local.ID {
		t.Fatalf("local instance %s after restart, want %s", got.ID, local.ID)
	}
	if n := len(env.Cloud().Instances()); n != 2 {
		t.Fatalf("%d instances after restart, want 2", n)
	}
	out, err := client.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{aws.ToString(vol.VolumeId)}})
	if err != nil {
		t.Fatal(err)
	}
	v := out.Volumes[0]
	if aws.ToInt32(v.Size) != 3 || len(v.Attachments) != 1 || v.Attachments[0].State != types.VolumeAttachmentStateAttached || len(v.Tags) != 1 {
		t.Fatalf("volume after restart %+v", v)
	}
	if _, err := client.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{aws.ToString(snap.SnapshotId)}}); err != nil {
		t.Fatalf("snapshot after restart: %v", err)
	}
	again, err := client.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(local.Zone), Size: aws.Int32(2), ClientToken: aws.String("pvc-1"),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{{Key: aws.String("CSIVolumeName"), Value: aws.String("pvc-1")}}}}})
	if err != nil || aws.ToString(again.VolumeId) != aws.ToString(vol.VolumeId) {
		t.Fatalf("idempotent create after restart: %v, %v", again.VolumeId, err)
	}
	// Metrics start afresh with the new process, as they would.
	if calls != 1 || env.Calls("CreateVolume") != 1 {
		t.Fatalf("CreateVolume counted %d before and %d after the restart", calls, env.Calls("CreateVolume"))
	}
}

func TestEnviron(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{Region: "eu-west-1"})
	e := env.Environ()
	if e["AWS_ENDPOINT_URL_EC2"] != env.EC2URL || e["AWS_EC2_METADATA_SERVICE_ENDPOINT"] != env.IMDSURL || e["AWS_REGION"] != "eu-west-1" {
		t.Fatalf("environ %v", e)
	}
	if env.Zone() != "eu-west-1a" {
		t.Fatalf("zone %s", env.Zone())
	}
}

func TestInMemory(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{InMemory: true})
	if env.DataDir != "" {
		t.Fatalf("an in-memory emulator has the data directory %q", env.DataDir)
	}
	if _, err := env.Cloud().CreateVolume(model.CreateVolumeInput{Zone: env.Zone(), Size: 1}); err != nil {
		t.Fatal(err)
	}
	env.Restart(t)
	if n := len(env.Cloud().Volumes()); n != 1 {
		t.Fatalf("after a restart the in-memory cloud holds %d volumes, want only the new root volume", n)
	}
}
