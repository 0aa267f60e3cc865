package ec2api_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

func TestTags(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	vol := f.volume(t, 1, tag("keep", "1"))
	snap, err := f.client.CreateSnapshot(f.ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(vol)})
	if err != nil {
		t.Fatal(err)
	}
	snapID := aws.ToString(snap.SnapshotId)
	tooMany := make([]types.Tag, 50)
	for i := range tooMany {
		tooMany[i] = tag(string(rune('A'+i%26))+string(rune('a'+i/26)), "x")
	}

	create := []struct {
		name string
		ids  []string
		tags []types.Tag
		want string
	}{
		{name: "volume and snapshot", ids: []string{vol, snapID}, tags: []types.Tag{tag("team", "red"), tag("env", "prod")}},
		{name: "instance", ids: []string{f.local}, tags: []types.Tag{tag("Name", "node-1")}},
		{name: "overwrite", ids: []string{vol}, tags: []types.Tag{tag("team", "blue")}},
		{name: "unknown volume", ids: []string{"vol-0123456789abcdef0"}, tags: []types.Tag{tag("a", "b")}, want: "InvalidVolume.NotFound"},
		{name: "unknown resource kind", ids: []string{"ami-0123456789abcdef0"}, tags: []types.Tag{tag("a", "b")}, want: "InvalidID"},
		{name: "reserved key", ids: []string{vol}, tags: []types.Tag{tag("aws:cloudformation", "b")}, want: "InvalidParameterValue"},
		{name: "over fifty tags", ids: []string{vol}, tags: tooMany, want: "TagLimitExceeded"},
	}
	for _, tc := range create {
		t.Run("create "+tc.name, func(t *testing.T) {
			_, err := f.client.CreateTags(f.ctx, &ec2.CreateTagsInput{Resources: tc.ids, Tags: tc.tags})
			if got := apiCode(err); got != tc.want {
				t.Fatalf("CreateTags: %v, want %q", err, tc.want)
			}
		})
	}
	if got := f.get(t, vol).Tags; len(got) != 3 {
		t.Fatalf("volume tags %+v, want keep, team=blue, env", got)
	}

	describe := []struct {
		name    string
		filters []types.Filter
		want    []string
	}{
		{name: "by resource", filters: []types.Filter{filter("resource-id", vol)}, want: []string{"env", "keep", "team"}},
		{name: "by key", filters: []types.Filter{filter("key", "team")}, want: []string{"team", "team"}},
		{name: "by value", filters: []types.Filter{filter("value", "blue")}, want: []string{"team"}},
		{name: "by type", filters: []types.Filter{filter("resource-type", "instance")}, want: []string{"Name"}},
		{name: "by tag", filters: []types.Filter{filter("tag:env", "prod")}, want: []string{"env", "env"}},
	}
	for _, tc := range describe {
		t.Run("describe "+tc.name, func(t *testing.T) {
			out, err := f.client.DescribeTags(f.ctx, &ec2.DescribeTagsInput{Filters: tc.filters})
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, d := range out.Tags {
				keys = append(keys, aws.ToString(d.Key))
			}
			slices.Sort(keys)
			if !slices.Equal(keys, tc.want) {
				t.Fatalf("keys %v, want %v", keys, tc.want)
			}
		})
	}

	del := []struct {
		name string
		tags []types.Tag
		want []string
	}{
		{name: "value must match", tags: []types.Tag{tag("team", "red")}, want: []string{"env", "keep", "team"}},
		{name: "by key and value", tags: []types.Tag{tag("team", "blue")}, want: []string{"env", "keep"}},
		{name: "by key alone", tags: []types.Tag{{Key: aws.String("env")}}, want: []string{"keep"}},
		{name: "all", tags: nil, want: nil},
	}
	for _, tc := range del {
		t.Run("delete "+tc.name, func(t *testing.T) {
			if _, err := f.client.DeleteTags(f.ctx, &ec2.DeleteTagsInput{Resources: []string{vol}, Tags: tc.tags}); err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, tg := range f.get(t, vol).Tags {
				keys = append(keys, aws.ToString(tg.Key))
			}
			slices.Sort(keys)
			if !slices.Equal(keys, tc.want) {
				t.Fatalf("keys %v, want %v", keys, tc.want)
			}
		})
	}
}

func TestDescribeAvailabilityZones(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	tests := []struct {
		name string
		in   ec2.DescribeAvailabilityZonesInput
		want []string
		code string
	}{
		{name: "all", in: ec2.DescribeAvailabilityZonesInput{}, want: []string{"us-east-1a/use1-az1", "us-east-1b/use1-az2", "us-east-1c/use1-az4"}},
		{name: "by name", in: ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{"us-east-1b"}}, want: []string{"us-east-1b/use1-az2"}},
		{name: "by ID", in: ec2.DescribeAvailabilityZonesInput{ZoneIds: []string{"use1-az4"}}, want: []string{"us-east-1c/use1-az4"}},
		{name: "by filter", in: ec2.DescribeAvailabilityZonesInput{Filters: []types.Filter{filter("zone-id", "use1-az1", "use1-az2")}}, want: []string{"us-east-1a/use1-az1", "us-east-1b/use1-az2"}},
		{name: "unknown name", in: ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{"us-east-1q"}}, code: "InvalidParameterValue"},
		{name: "dry run", in: ec2.DescribeAvailabilityZonesInput{DryRun: aws.Bool(true)}, code: "DryRunOperation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := f.client.DescribeAvailabilityZones(f.ctx, &tc.in)
			if got := apiCode(err); got != tc.code {
				t.Fatalf("DescribeAvailabilityZones: %v, want %q", err, tc.code)
			}
			if err != nil {
				return
			}
			var got []string
			for _, z := range out.AvailabilityZones {
				if aws.ToString(z.RegionName) != "us-east-1" || z.State != types.AvailabilityZoneStateAvailable {
					t.Fatalf("zone %+v", z)
				}
				got = append(got, aws.ToString(z.ZoneName)+"/"+aws.ToString(z.ZoneId))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDescribeInstanceTypes(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	tests := []struct {
		typ       types.InstanceType
		max       int32
		limitType types.AttachmentLimitType
		nvme      types.EbsNvmeSupport
	}{
		{typ: "m5.large", max: 28, limitType: types.AttachmentLimitTypeShared, nvme: types.EbsNvmeSupportRequired},
		{typ: "m7i.large", max: 32, limitType: types.AttachmentLimitTypeDedicated, nvme: types.EbsNvmeSupportRequired},
		{typ: "m7i.48xlarge", max: 128, limitType: types.AttachmentLimitTypeDedicated, nvme: types.EbsNvmeSupportRequired},
		{typ: "t2.medium", max: 39, nvme: types.EbsNvmeSupportUnsupported},
	}
	for _, tc := range tests {
		t.Run(string(tc.typ), func(t *testing.T) {
			out, err := f.client.DescribeInstanceTypes(f.ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{tc.typ}})
			if err != nil {
				t.Fatal(err)
			}
			ebs := out.InstanceTypes[0].EbsInfo
			if aws.ToInt32(ebs.MaximumEbsAttachments) != tc.max || ebs.AttachmentLimitType != tc.limitType || ebs.NvmeSupport != tc.nvme {
				t.Fatalf("EbsInfo %+v", ebs)
			}
		})
	}
	if _, err := f.client.DescribeInstanceTypes(f.ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"x9.huge"}}); apiCode(err) != "InvalidParameterValue" {
		t.Fatalf("unknown type: %v", err)
	}
	out, err := f.client.DescribeInstanceTypes(f.ctx, &ec2.DescribeInstanceTypesInput{Filters: []types.Filter{filter("ebs-info.attachment-limit-type", "dedicated")}})
	if err != nil || len(out.InstanceTypes) != 3 {
		t.Fatalf("dedicated types: %d, %v", len(out.InstanceTypes), err)
	}
}

func TestDescribeVolumeStatus(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	id := f.volume(t, 1)
	f.attach(t, id, f.local, "/dev/sdf")
	out, err := f.client.DescribeVolumeStatus(f.ctx, &ec2.DescribeVolumeStatusInput{VolumeIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	st := out.VolumeStatuses[0]
	if aws.ToString(st.VolumeId) != id || st.VolumeStatus.Status != types.VolumeStatusInfoStatusOk || len(st.AttachmentStatuses) != 1 ||
		aws.ToString(st.AttachmentStatuses[0].InstanceId) != f.local || st.InitializationStatusDetails != nil {
		t.Fatalf("volume status %+v", st)
	}
	if _, err := f.client.DescribeVolumeStatus(f.ctx, &ec2.DescribeVolumeStatusInput{VolumeIds: []string{"vol-0123456789abcdef0"}}); apiCode(err) != "InvalidVolume.NotFound" {
		t.Fatalf("unknown volume: %v", err)
	}
	all, err := f.client.DescribeVolumeStatus(f.ctx, &ec2.DescribeVolumeStatusInput{Filters: []types.Filter{filter("availability-zone", "us-east-1b")}})
	if err != nil || len(all.VolumeStatuses) != 0 {
		t.Fatalf("filtered status: %d, %v", len(all.VolumeStatuses), err)
	}
}

func TestReadSelectionsCounted(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	vol := f.volume(t, 1, types.Tag{Key: aws.String("CSIVolumeName"), Value: aws.String("pvc-1")})
	byName := []types.Filter{{Name: aws.String("tag:CSIVolumeName"), Values: []string{"pvc-1"}}}
	metrics := f.env.Metrics()
	tests := []struct {
		name          string
		call          func() error
		action, count string // what the call must add one to
	}{
		{name: "volumes by ID", action: "DescribeVolumes", count: "ids", call: func() error {
			_, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{vol}})
			return err
		}},
		{name: "volumes by name tag", action: "DescribeVolumes", count: "filters", call: func() error {
			_, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{Filters: byName})
			return err
		}},
		{name: "volumes by ID and name tag", action: "DescribeVolumes", count: "ids and filters", call: func() error {
			_, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{vol}, Filters: byName})
			return err
		}},
		{name: "every volume", action: "DescribeVolumes", count: "all", call: func() error {
			_, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{})
			return err
		}},
		{name: "an instance by ID", action: "DescribeInstances", count: "ids", call: func() error {
			_, err := f.client.DescribeInstances(f.ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{f.local}})
			return err
		}},
		{name: "a mutating call is no read", action: "CreateTags", call: func() error {
			_, err := f.client.CreateTags(f.ctx, &ec2.CreateTagsInput{Resources: []string{vol}, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}})
			return err
		}},
		{name: "a failed read is not counted", action: "DescribeVolumes", call: func() error {
			if _, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{"vol-0000000000000dead"}}); apiCode(err) != "InvalidVolume.NotFound" {
				return fmt.Errorf("reading a volume that does not exist: %v, want InvalidVolume.NotFound", err)
			}
			return nil
		}},
	}
	selections := []string{"ids", "filters", "ids and filters", "all"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := map[string]int{}
			for _, s := range selections {
				before[s] = metrics.CountReads(tc.action, s)
			}
			if err := tc.call(); err != nil {
				t.Fatal(err)
			}
			for _, s := range selections {
				want := before[s]
				if s == tc.count {
					want++
				}
				if got := metrics.CountReads(tc.action, s); got != want {
					t.Errorf("%s reads selecting %q: %d, want %d", tc.action, s, got, want)
				}
			}
		})
	}
}
