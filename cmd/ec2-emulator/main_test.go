package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskplane/diskplane/pkg/emulator"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/version"
)

func TestRunFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{name: "version", args: []string{"--version"}, wantCode: 0, wantOut: version.Version()},
		{name: "help", args: []string{"--help"}, wantCode: 0},
		{name: "unknown flag", args: []string{"--colour=red"}, wantCode: 2},
		{name: "stray argument", args: []string{"serve"}, wantCode: 2},
		{name: "bad configuration", args: []string{"--zones=x"}, wantCode: 2},
		{name: "describe-volumes help", args: []string{"describe-volumes", "--help"}, wantCode: 0},
		{name: "describe-volumes without an emulator", args: []string{"describe-volumes", "--admin=http://127.0.0.1:1"}, wantCode: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.wantCode {
				t.Fatalf("run(%v) = %d, want %d; stderr: %s", tc.args, code, tc.wantCode, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.wantOut) {
				t.Fatalf("stdout %q lacks %q", stdout.String(), tc.wantOut)
			}
		})
	}
}

func TestServe(t *testing.T) {
	o, err := parse(t, "--no-devices", "--data-dir="+t.TempDir(), "--listen=127.0.0.1:0", "--imds-listen=127.0.0.1:0",
		"--admin-listen=127.0.0.1:0", "--volume-create-latency=0s", "--instance=id=i-0123456789abcdef0,type=m5.large,local",
		"--unauthorized=DeleteVolume")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan emulator.Listeners, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, o, ready) }()
	var ls emulator.Listeners
	select {
	case ls = <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}

	client := ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + ls.EC2.Addr().String()),
		HTTPClient: emulatortest.HTTPClient(), Credentials: aws.AnonymousCredentials{}})
	vol, err := client.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String("us-east-1a"), Size: aws.Int32(4)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: vol.VolumeId}); err == nil || !strings.Contains(err.Error(), "UnauthorizedOperation") {
		t.Fatalf("DeleteVolume with the fault set: %v", err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"describe-volumes", "--admin=http://" + ls.Admin.Addr().String()}, &stdout, &stderr); code != 0 {
		t.Fatalf("describe-volumes = %d: %s", code, stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, aws.ToString(vol.VolumeId)) || !strings.Contains(out, "4GiB") || !strings.Contains(out, "i-0123456789abcdef0:/dev/xvda attached") {
		t.Fatalf("describe-volumes printed:\n%s", out)
	}
	stdout.Reset()
	if code := run([]string{"describe-volumes", "--json", "--admin=http://" + ls.Admin.Addr().String()}, &stdout, &stderr); code != 0 || !strings.HasPrefix(strings.TrimSpace(stdout.String()), "[") {
		t.Fatalf("describe-volumes --json = %d: %s", code, stdout.String())
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve after the stop: %v", err)
	}
}
