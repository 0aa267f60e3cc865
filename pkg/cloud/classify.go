package cloud

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// EC2 error codes the cloud layer acts on beyond classifying them.
const (
	codeIdempotentParameterMismatch = "IdempotentParameterMismatch"
	codeDryRunOperation             = "DryRunOperation"
	codeInvalidParameterValue       = "InvalidParameterValue"
	codeIncorrectState              = "IncorrectState"
	codeVolumeInUse                 = "VolumeInUse"
	codeInvalidVolumeNotFound       = "InvalidVolume.NotFound"
	codeInvalidInstanceIDNotFound   = "InvalidInstanceID.NotFound"
	codeInvalidModificationNotFound = "InvalidVolumeModification.NotFound"
)

// codeKinds says which sentinel error each EC2 error code means. Codes that
// are not listed are classified by their HTTP status (see classify).
var codeKinds = map[string]error{
	// A resource that does not exist, or an ID that cannot name one.
	codeInvalidVolumeNotFound:       ErrNotFound,
	"InvalidVolume.Malformed":       ErrNotFound,
	"InvalidVolumeID.Malformed":     ErrNotFound,
	"InvalidID":                     ErrNotFound,
	"InvalidSnapshot.NotFound":      ErrNotFound,
	"InvalidSnapshot.Malformed":     ErrNotFound,
	"InvalidSnapshotID.Malformed":   ErrNotFound,
	codeInvalidInstanceIDNotFound:   ErrNotFound,
	"InvalidInstanceID.Malformed":   ErrNotFound,
	"InvalidAttachment.NotFound":    ErrNotFound,
	codeInvalidModificationNotFound: ErrNotFound,

	codeIdempotentParameterMismatch: ErrIdempotentParameterMismatch,

	// The request itself is wrong; repeating it cannot help.
	codeInvalidParameterValue:     ErrInvalidArgument,
	"InvalidParameterCombination": ErrInvalidArgument,
	"InvalidParameter":            ErrInvalidArgument,
	"MissingParameter":            ErrInvalidArgument,
	"InvalidParameterDependency":  ErrInvalidArgument,
	"UnknownParameter":            ErrInvalidArgument,
	"UnknownVolumeType":           ErrInvalidArgument,
	"InvalidZone.NotFound":        ErrInvalidArgument,
	"InvalidAvailabilityZone":     ErrInvalidArgument,
	"InvalidVolume.ZoneMismatch":  ErrInvalidArgument,
	"InvalidKMSKey.Id":            ErrInvalidArgument,
	"InvalidKMSKey.NotFound":      ErrInvalidArgument,
	"InvalidKMSKey.InvalidState":  ErrInvalidArgument,
	"InvalidFilter":               ErrInvalidArgument,
	"InvalidNextToken":            ErrInvalidArgument,
	"InvalidPaginationToken":      ErrInvalidArgument,
	"TagLimitExceeded":            ErrInvalidArgument,
	"ValidationError":             ErrInvalidArgument,

	// An account, instance or volume limit.
	"VolumeLimitExceeded":                  ErrLimitExceeded,
	"SnapshotLimitExceeded":                ErrLimitExceeded,
	"ConcurrentSnapshotLimitExceeded":      ErrLimitExceeded,
	"AttachmentLimitExceeded":              ErrLimitExceeded,
	"MaxIOPSLimitExceeded":                 ErrLimitExceeded,
	"VolumeModificationSizeLimitExceeded":  ErrLimitExceeded,
	"ResourceLimitExceeded":                ErrLimitExceeded,
	"InsufficientVolumeCapacity":           ErrLimitExceeded,
	"InsufficientFreeAddressesInSubnet":    ErrLimitExceeded,
	"MaxConcurrentVolumeModificationLimit": ErrLimitExceeded,

	codeVolumeInUse:         ErrInUse,
	"InvalidSnapshot.InUse": ErrInUse,

	// The resource is busy with something else right now.
	codeIncorrectState:           ErrConflict,
	"IncorrectModificationState": ErrConflict,
	"IncorrectInstanceState":     ErrConflict,
	"OperationNotPermitted":      ErrConflict,
	// EC2 allows a volume only a few modifications a day.
	"VolumeModificationRateExceeded": ErrConflict,

	// Credentials or policy.
	"UnauthorizedOperation":       ErrPermissionDenied,
	"AuthFailure":                 ErrPermissionDenied,
	"Blocked":                     ErrPermissionDenied,
	"OptInRequired":               ErrPermissionDenied,
	"PendingVerification":         ErrPermissionDenied,
	"InvalidClientTokenId":        ErrPermissionDenied,
	"SignatureDoesNotMatch":       ErrPermissionDenied,
	"UnrecognizedClientException": ErrPermissionDenied,
	"AccessDenied":                ErrPermissionDenied,
	"AccessDeniedException":       ErrPermissionDenied,
	"ExpiredToken":                ErrPermissionDenied,
	"KMS.DisabledException":       ErrPermissionDenied,

	// The cloud does not offer the action.
	"InvalidAction":        ErrUnsupported,
	"UnsupportedOperation": ErrUnsupported,

	// The service failed; a later attempt may work.
	"InternalError":           ErrUnavailable,
	"InternalFailure":         ErrUnavailable,
	"ServiceUnavailable":      ErrUnavailable,
	"Unavailable":             ErrUnavailable,
	"RequestTimeout":          ErrUnavailable,
	"RequestTimeoutException": ErrUnavailable,
}

// ec2Error is how every failed EC2 call leaves the cloud layer: it wraps one
// of the sentinel errors (so errors.Is tells the driver what happened) and
// the SDK's own error, and its text keeps EC2's code and message for the user.
type ec2Error struct {
	operation string // the EC2 API, e.g. "AttachVolume"
	code      string // EC2's error code; empty when EC2 never answered
	message   string // EC2's error message
	kind      error  // the sentinel
	cause     error  // the SDK's error
}

// Error renders the EC2 code and message, which is what a user needs to act.
func (e *ec2Error) Error() string {
	if e.code != "" {
		return fmt.Sprintf("EC2 %s: %s: %s", e.operation, e.code, e.message)
	}
	return fmt.Sprintf("EC2 %s: %v: %v", e.operation, e.kind, e.cause)
}

// Unwrap exposes the sentinel error and the SDK error to errors.Is/As.
func (e *ec2Error) Unwrap() []error { return []error{e.kind, e.cause} }

// classify turns an error from the SDK into an *ec2Error wrapping the sentinel
// that says what it means. It returns nil for nil and leaves an error that is
// already classified as it is.
func classify(operation string, err error) error {
	if err == nil {
		return nil
	}
	var done *ec2Error
	if errors.As(err, &done) {
		return err
	}
	var opErr *smithy.OperationError
	if errors.As(err, &opErr) && opErr.OperationName != "" {
		operation = opErr.OperationName
	}
	e := &ec2Error{operation: operation, kind: ErrUnexpected, cause: err}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		e.code, e.message = apiErr.ErrorCode(), apiErr.ErrorMessage()
		switch kind, known := codeKinds[e.code]; {
		case known:
			e.kind = kind
		case isThrottle(e.code), httpStatus(err) >= http.StatusInternalServerError:
			// Still failing when the caller's deadline ended.
			e.kind = ErrUnavailable
		}
		return e
	}
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.As(err, &netErr) || httpStatus(err) >= http.StatusInternalServerError {
		e.kind = ErrUnavailable
	}
	return e
}

// errorCode returns the EC2 error code in err, or "" when there is none.
func errorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// refused reports whether a failed request was certainly not applied: EC2
// answered it with an error of the request (HTTP 4xx) or throttled it.
// After a server error, a dropped connection or a timeout the request may
// have been applied; only a later read can tell.
func refused(err error) bool {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	if isThrottle(apiErr.ErrorCode()) {
		return true
	}
	status := httpStatus(err)
	return status >= http.StatusBadRequest && status < http.StatusInternalServerError
}

// isThrottle reports whether an EC2 error code means the request rate was
// too high; the SDK's retryer uses the same list.
func isThrottle(code string) bool {
	_, ok := retry.DefaultThrottleErrorCodes[code]
	return ok
}

// httpStatus returns the HTTP status of a failed response, or 0.
func httpStatus(err error) int {
	var respErr *smithyhttp.ResponseError
	if errors.As(err, &respErr) {
		return respErr.HTTPStatusCode()
	}
	return 0
}

// isDeviceInUse reports whether AttachVolume failed because the device name
// is already taken on the instance: EC2 answers InvalidParameterValue and
// says the attachment point is already in use.
func isDeviceInUse(err error, device string) bool {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != codeInvalidParameterValue {
		return false
	}
	msg := apiErr.ErrorMessage()
	return strings.Contains(msg, "already in use") && strings.Contains(msg, strings.TrimPrefix(device, "/dev/"))
}
