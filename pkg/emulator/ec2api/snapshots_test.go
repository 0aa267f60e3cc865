package ec2api_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func TestSnapshotLifecycle(t *testing.T) {
	f := newFixture(t, emulatortest.Options{Latencies: model.Latencies{Snapshot: 200 * time.Millisecond}})
	vol := f.volume(t, 7)
	out, err := f.client.CreateSnapshot(f.ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(vol), Description: aws.String("nightly"),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeSnapshot, Tags: []types.Tag{tag("CSIVolumeSnapshotName", "s1")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.State != types.SnapshotStatePending || aws.ToInt32(out.VolumeSize) != 7 || aws.ToString(out.VolumeId) != vol ||
		aws.ToString(out.Description) != "nightly" || len(out.Tags) != 1 || aws.ToString(out.OwnerId) != f.env.Cloud().AccountID() {
		t.Fatalf("CreateSnapshot answered %+v", out)
	}
	// The SDK's own waiter polls DescribeSnapshots until completed.
	id := aws.ToString(out.SnapshotId)
	if err := ec2.NewSnapshotCompletedWaiter(f.client, func(o *ec2.SnapshotCompletedWaiterOptions) { o.MinDelay = 10 * time.Millisecond }).
		Wait(f.ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{id}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.DescribeSnapshots(f.ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Snapshots[0]; aws.ToString(s.Progress) != "100%" || s.State != types.SnapshotStateCompleted {
		t.Fatalf("completed snapshot %+v", s)
	}

	tests := []struct {
		name string
		call func() error
		want string
	}{
		{name: "snapshot of an unknown volume", want: "InvalidVolume.NotFound", call: func() error {
			_, err := f.client.CreateSnapshot(f.ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String("vol-0123456789abcdef0")})
			return err
		}},
		{name: "dry run", want: "DryRunOperation", call: func() error {
			_, err := f.client.CreateSnapshot(f.ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(vol), DryRun: aws.Bool(true)})
			return err
		}},
		{name: "restore smaller than the snapshot", want: "InvalidParameterValue", call: func() error {
			_, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), SnapshotId: aws.String(id), Size: aws.Int32(6)})
			return err
		}},
		{name: "delete unknown", want: "InvalidSnapshot.NotFound", call: func() error {
			_, err := f.client.DeleteSnapshot(f.ctx, &ec2.DeleteSnapshotInput{SnapshotId: aws.String("snap-0123456789abcdef0")})
			return err
		}},
		{name: "delete malformed", want: "InvalidSnapshotID.Malformed", call: func() error {
			_, err := f.client.DeleteSnapshot(f.ctx, &ec2.DeleteSnapshotInput{SnapshotId: aws.String("vol-0123456789abcdef0")})
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := apiCode(tc.call()); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}

	restored, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), SnapshotId: aws.String(id), VolumeType: types.VolumeTypeGp3})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToInt32(restored.Size) != 7 || aws.ToString(restored.SnapshotId) != id {
		t.Fatalf("restored volume %+v", restored)
	}
	status, err := f.client.DescribeVolumeStatus(f.ctx, &ec2.DescribeVolumeStatusInput{VolumeIds: []string{aws.ToString(restored.VolumeId)}})
	if err != nil {
		t.Fatal(err)
	}
	st := status.VolumeStatuses[0]
	if st.VolumeStatus.Status != types.VolumeStatusInfoStatusOk || st.InitializationStatusDetails == nil || aws.ToInt64(st.InitializationStatusDetails.Progress) != 100 {
		t.Fatalf("volume status %+v", st)
	}

	if _, err := f.client.DeleteSnapshot(f.ctx, &ec2.DeleteSnapshotInput{SnapshotId: aws.String(id)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.DescribeSnapshots(f.ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{id}}); apiCode(err) != "InvalidSnapshot.NotFound" {
		t.Fatalf("deleted snapshot: %v", err)
	}
}

func TestRestoreFromPendingSnapshot(t *testing.T) {
	f := newFixture(t, emulatortest.Options{Latencies: model.Latencies{Snapshot: time.Hour}})
	vol := f.volume(t, 1)
	out, err := f.client.CreateSnapshot(f.ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(vol)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), SnapshotId: out.SnapshotId})
	if apiCode(err) != "IncorrectState" {
		t.Fatalf("restore from a pending snapshot: %v", err)
	}
}

func TestEncryptionFollowsTheSnapshot(t *testing.T) {
	f := newFixture(t, emulatortest.Options{KMS: kms.Config{Keys: []kms.KeySpec{{ID: "mine", Aliases: []string{"alias/mine"}}}}})
	out, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(1), Encrypted: aws.Bool(true), KmsKeyId: aws.String("alias/mine")})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := f.client.CreateSnapshot(f.ctx, &ec2.CreateSnapshotInput{VolumeId: out.VolumeId})
	if err != nil || !aws.ToBool(snap.Encrypted) || aws.ToString(snap.KmsKeyId) != "alias/mine" {
		t.Fatalf("snapshot of an encrypted volume: %+v, %v", snap, err)
	}
	f.client.DescribeSnapshots(f.ctx, &ec2.DescribeSnapshotsInput{})
	restored, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), SnapshotId: snap.SnapshotId})
	if err != nil || !aws.ToBool(restored.Encrypted) || aws.ToString(restored.KmsKeyId) != "alias/mine" {
		t.Fatalf("restore of an encrypted snapshot: %+v, %v", restored, err)
	}
}

func TestCopyVolumes(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	src := f.volume(t, 10, tag("CSIVolumeName", "src"))
	in := func(size int32) *ec2.CopyVolumesInput {
		return &ec2.CopyVolumesInput{SourceVolumeId: aws.String(src), Size: aws.Int32(size), VolumeType: types.VolumeTypeGp3, ClientToken: aws.String("clone-1"),
			TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{tag("CSIVolumeName", "clone")}}}}
	}
	out, err := f.client.CopyVolumes(f.ctx, in(12))
	if err != nil {
		t.Fatal(err)
	}
	c := out.Volumes[0]
	if len(out.Volumes) != 1 || aws.ToString(c.SourceVolumeId) != src || aws.ToInt32(c.Size) != 12 || aws.ToString(c.AvailabilityZone) != f.zone ||
		c.State != types.VolumeStateCreating || aws.ToString(c.Tags[0].Value) != "clone" {
		t.Fatalf("CopyVolumes answered %+v", c)
	}
	again, err := f.client.CopyVolumes(f.ctx, in(12))
	if err != nil || aws.ToString(again.Volumes[0].VolumeId) != aws.ToString(c.VolumeId) {
		t.Fatalf("repeated CopyVolumes: %v", err)
	}
	tests := []struct {
		name string
		in   *ec2.CopyVolumesInput
		want string
	}{
		{name: "same token, other parameters", in: in(13), want: "IdempotentParameterMismatch"},
		{name: "smaller than the source", in: &ec2.CopyVolumesInput{SourceVolumeId: aws.String(src), Size: aws.Int32(9)}, want: "InvalidParameterValue"},
		{name: "unknown source", in: &ec2.CopyVolumesInput{SourceVolumeId: aws.String("vol-0123456789abcdef0")}, want: "InvalidVolume.NotFound"},
		{name: "dry run", in: &ec2.CopyVolumesInput{SourceVolumeId: aws.String(src), DryRun: aws.Bool(true)}, want: "DryRunOperation"},
		{name: "default size and type", in: &ec2.CopyVolumesInput{SourceVolumeId: aws.String(src)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := f.client.CopyVolumes(f.ctx, tc.in)
			if got := apiCode(err); got != tc.want {
				t.Fatalf("CopyVolumes: %v, want %q", err, tc.want)
			}
			if err == nil && (aws.ToInt32(out.Volumes[0].Size) != 10 || out.Volumes[0].VolumeType != types.VolumeTypeGp2) {
				t.Fatalf("default copy %+v", out.Volumes[0])
			}
		})
	}
}
