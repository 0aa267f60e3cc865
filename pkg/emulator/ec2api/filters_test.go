package ec2api_test

import (
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

func filter(name string, values ...string) types.Filter {
	return types.Filter{Name: aws.String(name), Values: values}
}

func TestDescribeVolumesFilters(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	a := f.volume(t, 1, tag("CSIVolumeName", "pvc-a"), tag("team", "red"))
	b := f.volume(t, 2, tag("CSIVolumeName", "pvc-b"))
	out, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String("us-east-1b"), Size: aws.Int32(4), VolumeType: types.VolumeTypeIo2, Iops: aws.Int32(100)})
	if err != nil {
		t.Fatal(err)
	}
	c := aws.ToString(out.VolumeId)
	snap, err := f.client.CreateSnapshot(f.ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(a)})
	if err != nil {
		t.Fatal(err)
	}
	// The next request completes the snapshot (every latency is 0).
	f.get(t, a)
	restored, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), SnapshotId: snap.SnapshotId})
	if err != nil {
		t.Fatal(err)
	}
	d := aws.ToString(restored.VolumeId)
	f.attach(t, a, f.local, "/dev/xvdba")
	var root string
	for _, v := range f.env.Cloud().Volumes() {
		if v.Root {
			root = v.ID
		}
	}

	tests := []struct {
		name    string
		filters []types.Filter
		want    []string
		code    string
	}{
		{name: "volume-id", filters: []types.Filter{filter("volume-id", a, c)}, want: []string{a, c}},
		{name: "tag", filters: []types.Filter{filter("tag:CSIVolumeName", "pvc-b")}, want: []string{b}},
		{name: "tag values are alternatives", filters: []types.Filter{filter("tag:CSIVolumeName", "pvc-a", "pvc-b")}, want: []string{a, b}},
		{name: "tag wildcard", filters: []types.Filter{filter("tag:CSIVolumeName", "pvc-*")}, want: []string{a, b}},
		{name: "tag-key", filters: []types.Filter{filter("tag-key", "team")}, want: []string{a}},
		{name: "attachment.instance-id", filters: []types.Filter{filter("attachment.instance-id", f.local)}, want: []string{root, a}},
		{name: "attachment.status", filters: []types.Filter{filter("attachment.status", "attached"), filter("tag-key", "CSIVolumeName")}, want: []string{a}},
		{name: "attachment.device", filters: []types.Filter{filter("attachment.device", "/dev/xvdba")}, want: []string{a}},
		{name: "availability-zone", filters: []types.Filter{filter("availability-zone", "us-east-1b")}, want: []string{c}},
		{name: "availability-zone-id", filters: []types.Filter{filter("availability-zone-id", "use1-az2")}, want: []string{c}},
		{name: "status", filters: []types.Filter{filter("status", "available")}, want: []string{b, c, d}},
		{name: "snapshot-id", filters: []types.Filter{filter("snapshot-id", aws.ToString(snap.SnapshotId))}, want: []string{d}},
		{name: "volume-type", filters: []types.Filter{filter("volume-type", "io2")}, want: []string{c}},
		{name: "size", filters: []types.Filter{filter("size", "2")}, want: []string{b}},
		{name: "filters combine", filters: []types.Filter{filter("status", "available", "in-use"), filter("tag:team", "red")}, want: []string{a}},
		{name: "no match", filters: []types.Filter{filter("tag:CSIVolumeName", "pvc-z")}, want: nil},
		{name: "unknown filter", filters: []types.Filter{filter("colour", "red")}, code: "InvalidParameterValue"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{Filters: tc.filters})
			if got := apiCode(err); got != tc.code {
				t.Fatalf("DescribeVolumes: %v, want %q", err, tc.code)
			}
			var got []string
			if out != nil {
				for _, v := range out.Volumes {
					got = append(got, aws.ToString(v.VolumeId))
				}
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
}

func TestDescribeSnapshotsFilters(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	v1, v2 := f.volume(t, 1), f.volume(t, 2)
	snap := func(vol string, tags ...types.Tag) string {
		in := &ec2.CreateSnapshotInput{VolumeId: aws.String(vol)}
		if len(tags) > 0 {
			in.TagSpecifications = []types.TagSpecification{{ResourceType: types.ResourceTypeSnapshot, Tags: tags}}
		}
		out, err := f.client.CreateSnapshot(f.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.SnapshotId)
	}
	s1 := snap(v1, tag("CSIVolumeSnapshotName", "snap-a"))
	s2 := snap(v2)
	s3 := snap(v2, tag("CSIVolumeSnapshotName", "snap-c"))
	owner := f.env.Cloud().AccountID()

	tests := []struct {
		name string
		in   ec2.DescribeSnapshotsInput
		want []string
		code string
	}{
		{name: "by ID", in: ec2.DescribeSnapshotsInput{SnapshotIds: []string{s2}}, want: []string{s2}},
		{name: "unknown ID", in: ec2.DescribeSnapshotsInput{SnapshotIds: []string{"snap-0123456789abcdef0"}}, code: "InvalidSnapshot.NotFound"},
		{name: "malformed ID", in: ec2.DescribeSnapshotsInput{SnapshotIds: []string{"snap-!"}}, code: "InvalidSnapshotID.Malformed"},
		{name: "volume-id", in: ec2.DescribeSnapshotsInput{Filters: []types.Filter{filter("volume-id", v2)}}, want: []string{s2, s3}},
		{name: "snapshot-id", in: ec2.DescribeSnapshotsInput{Filters: []types.Filter{filter("snapshot-id", s1)}}, want: []string{s1}},
		{name: "tag", in: ec2.DescribeSnapshotsInput{Filters: []types.Filter{filter("tag:CSIVolumeSnapshotName", "snap-c")}}, want: []string{s3}},
		{name: "status", in: ec2.DescribeSnapshotsInput{Filters: []types.Filter{filter("status", "completed")}}, want: []string{s1, s2, s3}},
		{name: "owner-id", in: ec2.DescribeSnapshotsInput{Filters: []types.Filter{filter("owner-id", owner)}}, want: []string{s1, s2, s3}},
		{name: "owner self", in: ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}}, want: []string{s1, s2, s3}},
		{name: "owner amazon", in: ec2.DescribeSnapshotsInput{OwnerIds: []string{"amazon"}}, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := f.client.DescribeSnapshots(f.ctx, &tc.in)
			if got := apiCode(err); got != tc.code {
				t.Fatalf("DescribeSnapshots: %v, want %q", err, tc.code)
			}
			var got []string
			if out != nil {
				for _, s := range out.Snapshots {
					got = append(got, aws.ToString(s.SnapshotId))
				}
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
}
