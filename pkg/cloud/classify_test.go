package cloud

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// sdkError builds an error shaped like the one the SDK returns for an EC2
// error response: an OperationError around a ResponseError around the API error.
func sdkError(op string, status int, code, message string) error {
	return &smithy.OperationError{
		ServiceID:     "EC2",
		OperationName: op,
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
				Err:      &smithy.GenericAPIError{Code: code, Message: message},
			},
			RequestID: "req-1",
		},
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		want     error
		wantText string
	}{
		{"volume not found", sdkError("DescribeVolumes", 400, "InvalidVolume.NotFound", "The volume 'vol-1' does not exist."), ErrNotFound,
			"EC2 DescribeVolumes: InvalidVolume.NotFound: The volume 'vol-1' does not exist."},
		{"malformed ID cannot exist", sdkError("DeleteVolume", 400, "InvalidVolume.Malformed", "Invalid id: \"bad\""), ErrNotFound, "InvalidVolume.Malformed"},
		{"instance not found", sdkError("DescribeInstances", 400, "InvalidInstanceID.NotFound", "no i-1"), ErrNotFound, "no i-1"},
		{"snapshot not found", sdkError("DeleteSnapshot", 400, "InvalidSnapshot.NotFound", "gone"), ErrNotFound, "gone"},
		{"token mismatch", sdkError("CreateVolume", 400, "IdempotentParameterMismatch", "token reused"), ErrIdempotentParameterMismatch, "token reused"},
		{"bad parameter", sdkError("CreateVolume", 400, "InvalidParameterValue", "size 0"), ErrInvalidArgument, "size 0"},
		{"bad combination", sdkError("CreateVolume", 400, "InvalidParameterCombination", "iops with gp2"), ErrInvalidArgument, "iops with gp2"},
		{"unknown type", sdkError("CreateVolume", 400, "UnknownVolumeType", "gp9"), ErrInvalidArgument, "gp9"},
		{"zone mismatch", sdkError("AttachVolume", 400, "InvalidVolume.ZoneMismatch", "other zone"), ErrInvalidArgument, "other zone"},
		{"volume limit", sdkError("CreateVolume", 400, "VolumeLimitExceeded", "too many"), ErrLimitExceeded, "too many"},
		{"attachment limit", sdkError("AttachVolume", 400, "AttachmentLimitExceeded", "full"), ErrLimitExceeded, "full"},
		{"in use", sdkError("DeleteVolume", 400, "VolumeInUse", "attached"), ErrInUse, "attached"},
		{"incorrect state", sdkError("DetachVolume", 400, "IncorrectState", "not attached"), ErrConflict, "not attached"},
		{"modification cool-down", sdkError("ModifyVolume", 400, "IncorrectModificationState", "6 hours"), ErrConflict, "6 hours"},
		{"unauthorized", sdkError("CreateVolume", 403, "UnauthorizedOperation", "no"), ErrPermissionDenied, "no"},
		{"bad credentials", sdkError("DescribeVolumes", 401, "AuthFailure", "who"), ErrPermissionDenied, "who"},
		{"internal error", sdkError("CreateVolume", 500, "InternalError", "oops"), ErrUnavailable, "oops"},
		{"an action the cloud does not offer", sdkError("CopyVolumes", 400, "InvalidAction", "The action CopyVolumes is not valid for this web service."), ErrUnsupported, "not valid"},
		{"unavailable", sdkError("CreateVolume", 503, "Unavailable", "busy"), ErrUnavailable, "busy"},
		{"throttled until the deadline", sdkError("AttachVolume", 503, "RequestLimitExceeded", "slow down"), ErrUnavailable, "slow down"},
		{"unknown 5xx code", sdkError("CreateVolume", 502, "Whatever", "bad gateway"), ErrUnavailable, "bad gateway"},
		{"unknown 4xx code", sdkError("CreateVolume", 400, "SomethingNew", "new"), ErrUnexpected, "SomethingNew: new"},
		{"deadline", fmt.Errorf("operation error EC2: CreateVolume, %w", context.DeadlineExceeded), ErrUnavailable, "deadline exceeded"},
		{"network", fmt.Errorf("send: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), ErrUnavailable, "connection refused"},
		{"other", errors.New("strange"), ErrUnexpected, "strange"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := classify("Op", tc.err)
			if !errors.Is(got, tc.want) {
				t.Errorf("classify() = %v, want it to wrap %v", got, tc.want)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("classify() lost the SDK error %v", tc.err)
			}
			if !strings.Contains(got.Error(), tc.wantText) {
				t.Errorf("message %q does not contain %q", got.Error(), tc.wantText)
			}
			if again := classify("Other", got); again != got {
				t.Errorf("classifying twice changed the error to %v", again)
			}
		})
	}
	if classify("Op", nil) != nil {
		t.Error("classify(nil) is not nil")
	}
}

func TestClassifyKeepsDeadlineInChain(t *testing.T) {
	err := classify("CreateVolume", fmt.Errorf("retry: %w", context.DeadlineExceeded))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("%v should wrap both ErrUnavailable and context.DeadlineExceeded", err)
	}
}

func TestIsDeviceInUse(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		device string
		want   bool
	}{
		{"EC2's in-use answer", sdkError("AttachVolume", 400, "InvalidParameterValue", "Invalid value '/dev/xvdba' for unixDevice. Attachment point /dev/xvdba is already in use"), "/dev/xvdba", true},
		{"names the device without /dev", sdkError("AttachVolume", 400, "InvalidParameterValue", "Attachment point xvdba is already in use"), "/dev/xvdba", true},
		{"another device", sdkError("AttachVolume", 400, "InvalidParameterValue", "Attachment point /dev/xvdbb is already in use"), "/dev/xvdba", false},
		{"another parameter problem", sdkError("AttachVolume", 400, "InvalidParameterValue", "Value (/dev/xvdba) for parameter device is invalid"), "/dev/xvdba", false},
		{"another code", sdkError("AttachVolume", 400, "VolumeInUse", "vol-1 is already in use"), "/dev/xvdba", false},
		{"no API error", errors.New("already in use /dev/xvdba"), "/dev/xvdba", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := isDeviceInUse(tc.err, tc.device); got != tc.want {
				t.Errorf("isDeviceInUse = %v, want %v", got, tc.want)
			}
		})
	}
}
