package ec2api_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// TestQuotasThroughTheSDK: every request that would take the account over a
// quota reaches an unmodified SDK client as EC2 sends it — HTTP 400, the
// limit's error code and a message naming the limit — and the SDK's
// standard retryer does not retry it.
func TestQuotasThroughTheSDK(t *testing.T) {
	f := newFixture(t, emulatortest.Options{Quotas: model.Quotas{StorageTiB: map[string]int64{"gp3": 1}, Snapshots: 1}})
	src := f.volume(t, 600)
	if _, err := f.client.CreateSnapshot(f.ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(src)}); err != nil {
		t.Fatal(err)
	}
	retrying := f.env.EC2Client()
	tests := []struct {
		name    string
		action  string
		call    func() error
		code    string
		message string
	}{
		{
			name: "CreateVolume", action: "CreateVolume", code: model.CodeVolumeLimitExceeded,
			message: "You have exceeded your maximum gp3 storage limit of 1 TiB in this region.",
			call: func() error {
				_, err := retrying.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(600), VolumeType: types.VolumeTypeGp3, ClientToken: aws.String("quota-1")})
				return err
			},
		},
		{
			name: "CopyVolumes", action: "CopyVolumes", code: model.CodeVolumeLimitExceeded,
			message: "You have exceeded your maximum gp3 storage limit of 1 TiB in this region.",
			call: func() error {
				_, err := retrying.CopyVolumes(f.ctx, &ec2.CopyVolumesInput{SourceVolumeId: aws.String(src), VolumeType: types.VolumeTypeGp3})
				return err
			},
		},
		{
			name: "ModifyVolume", action: "ModifyVolume", code: model.CodeVolumeLimitExceeded,
			message: "You have exceeded your maximum gp3 storage limit of 1 TiB in this region.",
			call: func() error {
				_, err := retrying.ModifyVolume(f.ctx, &ec2.ModifyVolumeInput{VolumeId: aws.String(src), Size: aws.Int32(1100)})
				return err
			},
		},
		{
			name: "CreateSnapshot", action: "CreateSnapshot", code: model.CodeSnapshotLimitExceeded,
			message: "You have reached the maximum number of snapshots allowed in this region (1).",
			call: func() error {
				_, err := retrying.CreateSnapshot(f.ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(src)})
				return err
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := f.env.Calls(tc.action)
			err := tc.call()
			var ae smithy.APIError
			if !errors.As(err, &ae) || ae.ErrorCode() != tc.code || !strings.HasPrefix(ae.ErrorMessage(), tc.message) {
				t.Fatalf("got %v, want %s: %s…", err, tc.code, tc.message)
			}
			var re *awshttp.ResponseError
			if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusBadRequest {
				t.Fatalf("got %v, want HTTP 400", err)
			}
			if n := f.env.Calls(tc.action) - before; n != 1 {
				t.Fatalf("the SDK sent %d requests, want 1 (a quota error is not retryable)", n)
			}
		})
	}
	vols, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{Filters: []types.Filter{{Name: aws.String("size"), Values: []string{"600"}}}})
	if err != nil || len(vols.Volumes) != 1 {
		t.Fatalf("after the refusals: %d volumes of 600 GiB (%v), want only the source", len(vols.Volumes), err)
	}
}
