package ec2api_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

func TestCreateVolumeValidation(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	zone := aws.String(f.zone)
	tests := []struct {
		name string
		in   ec2.CreateVolumeInput
		want string
	}{
		{name: "gp3 defaults", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(1), VolumeType: types.VolumeTypeGp3}},
		{name: "gp2 is the default type", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(1)}},
		{name: "by zone ID", in: ec2.CreateVolumeInput{AvailabilityZoneId: aws.String("use1-az2"), Size: aws.Int32(1)}},
		{name: "no zone", in: ec2.CreateVolumeInput{Size: aws.Int32(1)}, want: "MissingParameter"},
		{name: "zone and zone ID", in: ec2.CreateVolumeInput{AvailabilityZone: zone, AvailabilityZoneId: aws.String("use1-az1"), Size: aws.Int32(1)}, want: "InvalidParameterCombination"},
		{name: "unknown zone", in: ec2.CreateVolumeInput{AvailabilityZone: aws.String("us-east-1z"), Size: aws.Int32(1)}, want: "InvalidZone.NotFound"},
		{name: "unknown zone ID", in: ec2.CreateVolumeInput{AvailabilityZoneId: aws.String("use1-az9"), Size: aws.Int32(1)}, want: "InvalidZone.NotFound"},
		{name: "no size nor snapshot", in: ec2.CreateVolumeInput{AvailabilityZone: zone}, want: "MissingParameter"},
		{name: "unknown type", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(1), VolumeType: "gp9"}, want: "UnknownVolumeType"},
		{name: "too large", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(16385), VolumeType: types.VolumeTypeGp2}, want: "InvalidParameterValue"},
		{name: "iops on gp2", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(10), VolumeType: types.VolumeTypeGp2, Iops: aws.Int32(3000)}, want: "InvalidParameterCombination"},
		{name: "io2 without iops", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(10), VolumeType: types.VolumeTypeIo2}, want: "InvalidParameterCombination"},
		{name: "io2 iops ratio", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(10), VolumeType: types.VolumeTypeIo2, Iops: aws.Int32(20000)}, want: "InvalidParameterValue"},
		{name: "gp3 throughput ratio", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(100), VolumeType: types.VolumeTypeGp3, Throughput: aws.Int32(1000)}, want: "InvalidParameterValue"},
		{name: "throughput on io1", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(10), VolumeType: types.VolumeTypeIo1, Iops: aws.Int32(100), Throughput: aws.Int32(200)}, want: "InvalidParameterCombination"},
		{name: "multi-attach on gp3", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(10), VolumeType: types.VolumeTypeGp3, MultiAttachEnabled: aws.Bool(true)}, want: "InvalidParameterCombination"},
		{name: "kms key without encryption", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(10), KmsKeyId: aws.String("alias/x")}, want: "InvalidParameterDependency"},
		{name: "unknown snapshot", in: ec2.CreateVolumeInput{AvailabilityZone: zone, SnapshotId: aws.String("snap-0123456789abcdef0")}, want: "InvalidSnapshot.NotFound"},
		{name: "malformed snapshot", in: ec2.CreateVolumeInput{AvailabilityZone: zone, SnapshotId: aws.String("snapshot-1")}, want: "InvalidSnapshotID.Malformed"},
		{name: "reserved tag key", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(1), TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{tag("aws:x", "y")}}}}, want: "InvalidParameterValue"},
		{name: "tags for another resource type", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(1), TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeSnapshot, Tags: []types.Tag{tag("a", "b")}}}}, want: "InvalidParameterValue"},
		{name: "dry run of a valid request", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(1), DryRun: aws.Bool(true)}, want: "DryRunOperation"},
		{name: "dry run still validates", in: ec2.CreateVolumeInput{AvailabilityZone: zone, Size: aws.Int32(100), VolumeType: types.VolumeTypeIo2, Iops: aws.Int32(2147483647), DryRun: aws.Bool(true)}, want: "InvalidParameterValue"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.env.Cloud().Volumes())
			_, err := f.client.CreateVolume(f.ctx, &tc.in)
			if got := apiCode(err); got != tc.want {
				t.Fatalf("CreateVolume: %v, want code %q", err, tc.want)
			}
			created := len(f.env.Cloud().Volumes()) - before
			if (tc.want == "") != (created == 1) {
				t.Fatalf("%d volumes created, want %v", created, tc.want == "")
			}
		})
	}
}

func TestCreateVolumeAnswer(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	out, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{
		AvailabilityZone: aws.String(f.zone), Size: aws.Int32(50), VolumeType: types.VolumeTypeGp3,
		Iops: aws.Int32(4000), Throughput: aws.Int32(500), Encrypted: aws.Bool(true),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{tag("CSIVolumeName", "pvc-1")}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.State != types.VolumeStateCreating || aws.ToInt32(out.Size) != 50 || aws.ToInt32(out.Iops) != 4000 ||
		aws.ToInt32(out.Throughput) != 500 || !aws.ToBool(out.Encrypted) || aws.ToString(out.KmsKeyId) == "" ||
		aws.ToString(out.AvailabilityZoneId) != "use1-az1" || len(out.Tags) != 1 || out.CreateTime == nil {
		t.Fatalf("CreateVolume answered %+v", out)
	}
	v := f.get(t, aws.ToString(out.VolumeId))
	if v.State != types.VolumeStateAvailable || v.VolumeType != types.VolumeTypeGp3 || aws.ToString(v.Tags[0].Value) != "pvc-1" {
		t.Fatalf("described %+v", v)
	}
	gp2, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(100)})
	if err != nil {
		t.Fatal(err)
	}
	if gp2.VolumeType != types.VolumeTypeGp2 || aws.ToInt32(gp2.Iops) != 300 || gp2.Throughput != nil {
		t.Fatalf("gp2 volume: type %s iops %v throughput %v", gp2.VolumeType, aws.ToInt32(gp2.Iops), gp2.Throughput)
	}
}

func TestClientToken(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	in := func(size int32) *ec2.CreateVolumeInput {
		return &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(size), ClientToken: aws.String("token-1"),
			TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{tag("CSIVolumeName", "pvc-1")}}}}
	}
	first, err := f.client.CreateVolume(f.ctx, in(5))
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.client.CreateVolume(f.ctx, in(5))
	if err != nil || aws.ToString(again.VolumeId) != aws.ToString(first.VolumeId) {
		t.Fatalf("same token and parameters: %v, %v; want %s", again.VolumeId, err, aws.ToString(first.VolumeId))
	}
	if again.State != types.VolumeStateAvailable {
		t.Fatalf("the repeat shows state %s, want the volume as it is now", again.State)
	}
	if _, err := f.client.CreateVolume(f.ctx, in(6)); apiCode(err) != "IdempotentParameterMismatch" {
		t.Fatalf("same token, other size: %v", err)
	}
	if n := len(f.env.Cloud().Volumes()); n != 2 {
		t.Fatalf("%d volumes (root + one), want 2", n)
	}
	// The token of a deleted volume is refused, as EC2 refuses it.
	if _, err := f.client.DeleteVolume(f.ctx, &ec2.DeleteVolumeInput{VolumeId: first.VolumeId}); err != nil {
		t.Fatal(err)
	}
	f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{})
	if _, err := f.client.CreateVolume(f.ctx, in(5)); apiCode(err) != "IdempotentParameterMismatch" {
		t.Fatalf("token of a deleted volume: %v, want IdempotentParameterMismatch", err)
	}
	other, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(5), ClientToken: aws.String("token-2")})
	if err != nil || aws.ToString(other.VolumeId) == aws.ToString(first.VolumeId) {
		t.Fatalf("another token: %v, %v", other.VolumeId, err)
	}
}

func TestDeleteVolume(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	free := f.volume(t, 1)
	used := f.volume(t, 1)
	f.attach(t, used, f.local, "/dev/xvdba")
	tests := []struct {
		name string
		id   string
		dry  bool
		want string
	}{
		{name: "in use", id: used, want: "VolumeInUse"},
		{name: "unknown", id: "vol-0123456789abcdef0", want: "InvalidVolume.NotFound"},
		{name: "malformed", id: "volume-1", want: "InvalidVolumeID.Malformed"},
		{name: "dry run", id: free, dry: true, want: "DryRunOperation"},
		{name: "available", id: free},
		{name: "already deleted", id: free, want: "InvalidVolume.NotFound"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.client.DeleteVolume(f.ctx, &ec2.DeleteVolumeInput{VolumeId: aws.String(tc.id), DryRun: aws.Bool(tc.dry)})
			if got := apiCode(err); got != tc.want {
				t.Fatalf("DeleteVolume: %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{free}}); apiCode(err) != "InvalidVolume.NotFound" {
		t.Fatalf("deleted volume still described: %v", err)
	}
}

func TestDescribeVolumesNotFound(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	id := f.volume(t, 1)
	tests := []struct {
		name string
		ids  []string
		want string
	}{
		{name: "one known", ids: []string{id}},
		{name: "one unknown poisons the call", ids: []string{id, "vol-0123456789abcdef0"}, want: "InvalidVolume.NotFound"},
		{name: "malformed", ids: []string{"vol-xyz"}, want: "InvalidVolumeID.Malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: tc.ids})
			if got := apiCode(err); got != tc.want {
				t.Fatalf("DescribeVolumes: %v, want %q", err, tc.want)
			}
		})
	}
	// A filter on an unknown ID is simply empty.
	out, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{Filters: []types.Filter{{Name: aws.String("volume-id"), Values: []string{"vol-0123456789abcdef0"}}}})
	if err != nil || len(out.Volumes) != 0 {
		t.Fatalf("filter on an unknown ID: %d volumes, %v", len(out.Volumes), err)
	}
}
