package cloud

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func TestModifyVolume(t *testing.T) {
	t.Parallel()
	c, env := start(t, emulatortest.Options{})
	tests := []struct {
		name      string
		create    CreateVolumeOptions
		mod       VolumeModification
		want      func(v *Volume) bool
		wantCalls int
		err       error
		motoLacks string
	}{
		{"grow", CreateVolumeOptions{SizeGiB: 1}, VolumeModification{SizeGiB: 3},
			func(v *Volume) bool { return v.SizeGiB == 3 }, 1, nil, ""},
		{"gp2 to gp3 with IOPS and throughput", CreateVolumeOptions{SizeGiB: 10, Type: VolumeTypeGP2},
			VolumeModification{Type: VolumeTypeGP3, IOPS: 4000, Throughput: 200},
			func(v *Volume) bool { return v.Type == VolumeTypeGP3 && v.IOPS == 4000 && v.Throughput == 200 }, 1, nil, ""},
		{"what the volume already is", CreateVolumeOptions{SizeGiB: 5}, VolumeModification{SizeGiB: 5, Type: VolumeTypeGP3},
			func(v *Volume) bool { return v.SizeGiB == 5 }, 0, nil, ""},
		{"nothing", CreateVolumeOptions{SizeGiB: 5}, VolumeModification{},
			func(v *Volume) bool { return v.SizeGiB == 5 }, 0, nil, ""},
		{"a size it already exceeds", CreateVolumeOptions{SizeGiB: 5}, VolumeModification{SizeGiB: 4},
			func(v *Volume) bool { return v.SizeGiB == 5 }, 0, nil, ""},
		{"IOPS EC2 refuses", CreateVolumeOptions{SizeGiB: 5}, VolumeModification{IOPS: 1}, nil, 1, ErrInvalidArgument,
			"accepts any IOPS in ModifyVolume (EC2: gp3 from 3,000 IOPS, InvalidParameterValue below)"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.motoLacks != "" {
				emulatorOnly(t, tc.motoLacks)
			}
			vol := mustCreate(t, c, "pvc-"+string(rune('a'+i)), &tc.create)
			before := env.Calls("ModifyVolume")
			got, err := c.ModifyVolume(testContext(t), vol.ID, tc.mod)
			wantErr(t, err, tc.err)
			if calls := env.Calls("ModifyVolume") - before; calls != tc.wantCalls {
				t.Errorf("%d ModifyVolume calls, want %d", calls, tc.wantCalls)
			}
			if err != nil {
				return
			}
			if !tc.want(got) {
				t.Errorf("returned %+v", got)
			}
			if now, err := c.GetVolume(testContext(t), vol.ID); err != nil || !tc.want(now) {
				t.Errorf("volume now %+v, %v", now, err)
			}
		})
	}
	_, err := c.ModifyVolume(testContext(t), "vol-0123456789abcdef0", VolumeModification{SizeGiB: 2})
	wantErr(t, err, ErrNotFound)
}

func TestModifyVolumeInProgress(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{
		ModificationsPerDay: -1,
		Latencies:           model.Latencies{Modify: 300 * time.Millisecond, Optimize: time.Hour},
	}, "has no modifying phase: a modification is completed as ModifyVolume answers")
	vol := mustCreate(t, c, "pvc-1", &CreateVolumeOptions{SizeGiB: 1})
	if _, err := rawClient(env).ModifyVolume(testContext(t), &ec2.ModifyVolumeInput{VolumeId: aws.String(vol.ID), Size: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	// The same change again is awaited, not issued again.
	got, err := c.ModifyVolume(testContext(t), vol.ID, VolumeModification{SizeGiB: 2})
	if err != nil || got.SizeGiB != 2 {
		t.Fatalf("ModifyVolume = %+v, %v", got, err)
	}
	if n := env.Calls("ModifyVolume"); n != 1 {
		t.Errorf("%d ModifyVolume calls; the one in progress should have been awaited", n)
	}
	// Now optimizing, which counts as done: asking again sends nothing.
	if _, err := c.ModifyVolume(testContext(t), vol.ID, VolumeModification{SizeGiB: 2}); err != nil {
		t.Fatal(err)
	}
	// Another change must wait until EC2 has finished optimizing.
	_, err = c.ModifyVolume(testContext(t), vol.ID, VolumeModification{SizeGiB: 3})
	wantErr(t, err, ErrConflict)
	if n := env.Calls("ModifyVolume"); n != 1 {
		t.Errorf("%d ModifyVolume calls, want still 1", n)
	}
}

func TestModifyVolumeRateLimit(t *testing.T) {
	t.Parallel()
	c, _ := startEmulator(t, emulatortest.Options{ModificationsPerDay: 1},
		"does not limit how often a volume is modified (EC2: four modifications in any rolling 24 hours)")
	vol := mustCreate(t, c, "pvc-1", &CreateVolumeOptions{SizeGiB: 1})
	if _, err := c.ModifyVolume(testContext(t), vol.ID, VolumeModification{SizeGiB: 2}); err != nil {
		t.Fatal(err)
	}
	_, err := c.ModifyVolume(testContext(t), vol.ID, VolumeModification{SizeGiB: 3})
	wantErr(t, err, ErrConflict)
}
