package ec2api_test

import (
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func TestDescribeVolumesPagination(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	var want []string
	for range 12 {
		want = append(want, f.volume(t, 1, tag("group", "paged")))
	}
	slices.Sort(want)
	filter := []types.Filter{{Name: aws.String("tag:group"), Values: []string{"paged"}}}

	var got []string
	pages := 0
	p := ec2.NewDescribeVolumesPaginator(f.client, &ec2.DescribeVolumesInput{Filters: filter, MaxResults: aws.Int32(5)})
	for p.HasMorePages() {
		out, err := p.NextPage(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, v := range out.Volumes {
			got = append(got, aws.ToString(v.VolumeId))
		}
	}
	slices.Sort(got)
	if pages != 3 || !slices.Equal(got, want) {
		t.Fatalf("%d pages with %d volumes, want 3 pages with %d", pages, len(got), len(want))
	}

	tests := []struct {
		name string
		in   ec2.DescribeVolumesInput
		want string
	}{
		{name: "below the minimum", in: ec2.DescribeVolumesInput{MaxResults: aws.Int32(4)}, want: "InvalidParameterValue"},
		{name: "above the maximum is capped", in: ec2.DescribeVolumesInput{MaxResults: aws.Int32(1000)}},
		{name: "with volume IDs", in: ec2.DescribeVolumesInput{MaxResults: aws.Int32(5), VolumeIds: want[:1]}, want: "InvalidParameterCombination"},
		{name: "garbage token", in: ec2.DescribeVolumesInput{MaxResults: aws.Int32(5), NextToken: aws.String("%%%")}, want: "InvalidPaginationToken"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.client.DescribeVolumes(f.ctx, &tc.in)
			if got := apiCode(err); got != tc.want {
				t.Fatalf("DescribeVolumes: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDescribeSnapshotsAndInstancesPagination(t *testing.T) {
	var specs []model.InstanceSpec
	for range 7 {
		specs = append(specs, model.InstanceSpec{Type: "t3.medium"})
	}
	f := newFixture(t, emulatortest.Options{Instances: specs})
	vol := f.volume(t, 1)
	for range 7 {
		if _, err := f.client.CreateSnapshot(f.ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(vol)}); err != nil {
			t.Fatal(err)
		}
	}
	snaps := 0
	sp := ec2.NewDescribeSnapshotsPaginator(f.client, &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}, MaxResults: aws.Int32(5)})
	for sp.HasMorePages() {
		out, err := sp.NextPage(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		snaps += len(out.Snapshots)
	}
	instances := 0
	ip := ec2.NewDescribeInstancesPaginator(f.client, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5)})
	for ip.HasMorePages() {
		out, err := ip.NextPage(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range out.Reservations {
			instances += len(r.Instances)
		}
	}
	if snaps != 7 || instances != 7 {
		t.Fatalf("paged through %d snapshots and %d instances, want 7 and 7", snaps, instances)
	}

	tests := []struct {
		name string
		call func() error
		want string
	}{
		{name: "snapshots below the minimum", want: "InvalidParameterValue", call: func() error {
			_, err := f.client.DescribeSnapshots(f.ctx, &ec2.DescribeSnapshotsInput{MaxResults: aws.Int32(4)})
			return err
		}},
		{name: "snapshots with IDs", want: "InvalidParameterCombination", call: func() error {
			_, err := f.client.DescribeSnapshots(f.ctx, &ec2.DescribeSnapshotsInput{MaxResults: aws.Int32(5), SnapshotIds: []string{"snap-0123456789abcdef0"}})
			return err
		}},
		{name: "instances below the minimum", want: "InvalidParameterValue", call: func() error {
			_, err := f.client.DescribeInstances(f.ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(3)})
			return err
		}},
		{name: "instances with IDs", want: "InvalidParameterCombination", call: func() error {
			_, err := f.client.DescribeInstances(f.ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5), InstanceIds: []string{f.local}})
			return err
		}},
		{name: "instances at the maximum", call: func() error {
			_, err := f.client.DescribeInstances(f.ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(1000)})
			return err
		}},
		{name: "tags below the minimum", want: "InvalidParameterValue", call: func() error {
			_, err := f.client.DescribeTags(f.ctx, &ec2.DescribeTagsInput{MaxResults: aws.Int32(1)})
			return err
		}},
		{name: "instance types above their maximum are capped", call: func() error {
			_, err := f.client.DescribeInstanceTypes(f.ctx, &ec2.DescribeInstanceTypesInput{MaxResults: aws.Int32(500)})
			return err
		}},
		{name: "modifications below the minimum", want: "InvalidParameterValue", call: func() error {
			_, err := f.client.DescribeVolumesModifications(f.ctx, &ec2.DescribeVolumesModificationsInput{MaxResults: aws.Int32(2)})
			return err
		}},
		{name: "volume status with IDs", want: "InvalidParameterCombination", call: func() error {
			_, err := f.client.DescribeVolumeStatus(f.ctx, &ec2.DescribeVolumeStatusInput{MaxResults: aws.Int32(5), VolumeIds: []string{vol}})
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
}

// TestOtherDescribeActionsPageThrough walks the SDK's paginators of the
// remaining paged actions at their smallest page size: every item once,
// over more than one page.
func TestOtherDescribeActionsPageThrough(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	const n = 7
	for range n {
		vol := f.volume(t, 1, tag("group", "paged"))
		if _, err := f.client.ModifyVolume(f.ctx, &ec2.ModifyVolumeInput{VolumeId: aws.String(vol), Size: aws.Int32(2)}); err != nil {
			t.Fatal(err)
		}
	}
	allTypes, err := f.client.DescribeInstanceTypes(f.ctx, &ec2.DescribeInstanceTypesInput{})
	if err != nil {
		t.Fatal(err)
	}
	page := aws.Int32(5)

	tests := []struct {
		name string
		want int
		walk func() (items, pages int, err error)
	}{
		{name: "DescribeVolumesModifications", want: n, walk: func() (int, int, error) {
			p := ec2.NewDescribeVolumesModificationsPaginator(f.client, &ec2.DescribeVolumesModificationsInput{MaxResults: page})
			items, pages := 0, 0
			for p.HasMorePages() {
				out, err := p.NextPage(f.ctx)
				if err != nil {
					return 0, 0, err
				}
				items, pages = items+len(out.VolumesModifications), pages+1
			}
			return items, pages, nil
		}},
		{name: "DescribeTags", want: n, walk: func() (int, int, error) {
			p := ec2.NewDescribeTagsPaginator(f.client, &ec2.DescribeTagsInput{MaxResults: page,
				Filters: []types.Filter{{Name: aws.String("key"), Values: []string{"group"}}}})
			items, pages := 0, 0
			for p.HasMorePages() {
				out, err := p.NextPage(f.ctx)
				if err != nil {
					return 0, 0, err
				}
				items, pages = items+len(out.Tags), pages+1
			}
			return items, pages, nil
		}},
		{name: "DescribeVolumeStatus", want: len(f.env.Cloud().Volumes()), walk: func() (int, int, error) {
			p := ec2.NewDescribeVolumeStatusPaginator(f.client, &ec2.DescribeVolumeStatusInput{MaxResults: page})
			items, pages := 0, 0
			for p.HasMorePages() {
				out, err := p.NextPage(f.ctx)
				if err != nil {
					return 0, 0, err
				}
				items, pages = items+len(out.VolumeStatuses), pages+1
			}
			return items, pages, nil
		}},
		{name: "DescribeInstanceTypes", want: len(allTypes.InstanceTypes), walk: func() (int, int, error) {
			p := ec2.NewDescribeInstanceTypesPaginator(f.client, &ec2.DescribeInstanceTypesInput{MaxResults: page})
			items, pages := 0, 0
			for p.HasMorePages() {
				out, err := p.NextPage(f.ctx)
				if err != nil {
					return 0, 0, err
				}
				items, pages = items+len(out.InstanceTypes), pages+1
			}
			return items, pages, nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want <= 5 {
				t.Fatalf("only %d items: the walk would fit one page", tc.want)
			}
			items, pages, err := tc.walk()
			if err != nil {
				t.Fatal(err)
			}
			if wantPages := (tc.want + 4) / 5; items != tc.want || pages != wantPages {
				t.Errorf("%d items over %d pages, want %d over %d", items, pages, tc.want, wantPages)
			}
		})
	}
}
