//go:build linux

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

func TestReleaseDevices(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{Devices: true})
	client := env.EC2Client()
	vol, err := client.CreateVolume(t.Context(), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(env.Zone()), Size: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.AttachVolume(t.Context(), &ec2.AttachVolumeInput{VolumeId: vol.VolumeId, InstanceId: aws.String(env.LocalInstance().ID), Device: aws.String("/dev/sdf")}); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(env.LinkDir, disks.LinkName(aws.ToString(vol.VolumeId)))
	waitLink := func() {
		t.Helper()
		for range 1000 {
			if _, err := os.Lstat(link); err == nil {
				return
			}
			// Each call applies due state changes, like the attach.
			if _, err := client.DescribeVolumes(t.Context(), &ec2.DescribeVolumesInput{}); err != nil {
				t.Fatal(err)
			}
		}
		t.Fatalf("%s never appeared", link)
	}
	waitLink()
	if err := env.Emulator().Close(); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"release-devices", "--data-dir=" + env.DataDir, "--device-link-dir=" + env.LinkDir}, &stdout, &stderr); code != 0 {
		t.Fatalf("release-devices = %d: %s", code, stderr.String())
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Fatalf("link after release-devices: %v", err)
	}
	// The state is untouched: a restart makes the device again.
	env.Restart(t)
	waitLink()
}
