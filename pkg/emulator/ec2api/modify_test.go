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

func TestModifyVolume(t *testing.T) {
	// Modifying ends at the first look; optimizing lasts, so the second
	// modification below meets one in progress whatever the machine's speed.
	f := newFixture(t, emulatortest.Options{Latencies: model.Latencies{Optimize: time.Hour}})
	id := f.volume(t, 10)
	out, err := f.client.ModifyVolume(f.ctx, &ec2.ModifyVolumeInput{VolumeId: aws.String(id), Size: aws.Int32(20), Iops: aws.Int32(5000), Throughput: aws.Int32(300)})
	if err != nil {
		t.Fatal(err)
	}
	m := out.VolumeModification
	if m.ModificationState != types.VolumeModificationStateModifying || aws.ToInt32(m.OriginalSize) != 10 || aws.ToInt32(m.TargetSize) != 20 ||
		aws.ToInt32(m.OriginalIops) != 3000 || aws.ToInt32(m.TargetIops) != 5000 || aws.ToInt32(m.TargetThroughput) != 300 ||
		m.TargetVolumeType != types.VolumeTypeGp3 || m.StartTime == nil {
		t.Fatalf("ModifyVolume answered %+v", m)
	}
	mods, err := f.client.DescribeVolumesModifications(f.ctx, &ec2.DescribeVolumesModificationsInput{VolumeIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if s := mods.VolumesModifications[0].ModificationState; s != types.VolumeModificationStateOptimizing {
		t.Fatalf("modification is %s, want optimizing", s)
	}
	if _, err := f.client.ModifyVolume(f.ctx, &ec2.ModifyVolumeInput{VolumeId: aws.String(id), Size: aws.Int32(30)}); apiCode(err) != "IncorrectModificationState" {
		t.Fatalf("a second modification while one runs: %v", err)
	}
	if v := f.get(t, id); aws.ToInt32(v.Size) != 20 || aws.ToInt32(v.Iops) != 5000 || aws.ToInt32(v.Throughput) != 300 {
		t.Fatalf("an optimizing volume shows %+v, want the new settings", v)
	}

	other := f.volume(t, 10)
	tests := []struct {
		name string
		in   ec2.ModifyVolumeInput
		want string
	}{
		{name: "shrink", in: ec2.ModifyVolumeInput{VolumeId: aws.String(other), Size: aws.Int32(5)}, want: "InvalidParameterValue"},
		// Found by comparing answers with moto's (tests/moto): a size of 0
		// was taken for no size.
		{name: "size 0", in: ec2.ModifyVolumeInput{VolumeId: aws.String(other), Size: aws.Int32(0)}, want: "InvalidParameterValue"},
		{name: "unknown type", in: ec2.ModifyVolumeInput{VolumeId: aws.String(other), VolumeType: "gp9"}, want: "UnknownVolumeType"},
		{name: "iops on gp2", in: ec2.ModifyVolumeInput{VolumeId: aws.String(other), VolumeType: types.VolumeTypeGp2, Iops: aws.Int32(3000)}, want: "InvalidParameterCombination"},
		{name: "iops out of range", in: ec2.ModifyVolumeInput{VolumeId: aws.String(other), Iops: aws.Int32(100)}, want: "InvalidParameterValue"},
		{name: "unknown volume", in: ec2.ModifyVolumeInput{VolumeId: aws.String("vol-0123456789abcdef0"), Size: aws.Int32(20)}, want: "InvalidVolume.NotFound"},
		{name: "dry run", in: ec2.ModifyVolumeInput{VolumeId: aws.String(other), Size: aws.Int32(20), DryRun: aws.Bool(true)}, want: "DryRunOperation"},
		{name: "type change", in: ec2.ModifyVolumeInput{VolumeId: aws.String(other), VolumeType: types.VolumeTypeIo2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.client.ModifyVolume(f.ctx, &tc.in)
			if got := apiCode(err); got != tc.want {
				t.Fatalf("ModifyVolume: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDescribeVolumesModifications(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	modified, untouched := f.volume(t, 10), f.volume(t, 10)
	if _, err := f.client.ModifyVolume(f.ctx, &ec2.ModifyVolumeInput{VolumeId: aws.String(modified), Size: aws.Int32(11)}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   ec2.DescribeVolumesModificationsInput
		want int
		code string
	}{
		{name: "by ID", in: ec2.DescribeVolumesModificationsInput{VolumeIds: []string{modified}}, want: 1},
		{name: "never modified", in: ec2.DescribeVolumesModificationsInput{VolumeIds: []string{modified, untouched}}, code: "InvalidVolumeModification.NotFound"},
		{name: "unknown volume", in: ec2.DescribeVolumesModificationsInput{VolumeIds: []string{"vol-0123456789abcdef0"}}, code: "InvalidVolume.NotFound"},
		{name: "all", in: ec2.DescribeVolumesModificationsInput{}, want: 1},
		{name: "by state", in: ec2.DescribeVolumesModificationsInput{Filters: []types.Filter{filter("modification-state", "completed")}}, want: 1},
		{name: "by target size", in: ec2.DescribeVolumesModificationsInput{Filters: []types.Filter{filter("target-size", "12")}}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := f.client.DescribeVolumesModifications(f.ctx, &tc.in)
			if got := apiCode(err); got != tc.code {
				t.Fatalf("DescribeVolumesModifications: %v, want %q", err, tc.code)
			}
			if err == nil && len(out.VolumesModifications) != tc.want {
				t.Fatalf("%d modifications, want %d", len(out.VolumesModifications), tc.want)
			}
		})
	}
}

func TestModificationRateLimit(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	id := f.volume(t, 10)
	for size := int32(11); size <= 14; size++ {
		if _, err := f.client.ModifyVolume(f.ctx, &ec2.ModifyVolumeInput{VolumeId: aws.String(id), Size: aws.Int32(size)}); err != nil {
			t.Fatalf("modification %d: %v", size-10, err)
		}
		f.get(t, id)
	}
	if _, err := f.client.ModifyVolume(f.ctx, &ec2.ModifyVolumeInput{VolumeId: aws.String(id), Size: aws.Int32(15)}); apiCode(err) != "VolumeModificationRateExceeded" {
		t.Fatalf("fifth modification in a day: %v", err)
	}
}
