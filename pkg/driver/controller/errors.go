package controller

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/coalescer"
	"github.com/diskplane/diskplane/pkg/driver/parameters"
	"github.com/diskplane/diskplane/pkg/inflight"
)

// cloudCodes says which gRPC code each cloud sentinel error becomes, in the
// CSI spec's terms: a missing source, volume or node is NotFound, an account
// or attachment limit ResourceExhausted, an action the cloud does not offer
// InvalidArgument (the request must change), a volume busy elsewhere
// FailedPrecondition, IAM refusing a call PermissionDenied, work the cloud
// goes on with after the caller's deadline DeadlineExceeded, and a cloud
// that keeps failing, or cannot answer safely yet, Unavailable (the
// sidecars retry both, and the provisioner does not take either as final).
var cloudCodes = []struct {
	err  error
	code codes.Code
}{
	{cloud.ErrNotFound, codes.NotFound},
	{cloud.ErrAlreadyExists, codes.AlreadyExists},
	{cloud.ErrIdempotentParameterMismatch, codes.AlreadyExists},
	{cloud.ErrInvalidArgument, codes.InvalidArgument},
	{cloud.ErrLimitExceeded, codes.ResourceExhausted},
	{cloud.ErrAttachedElsewhere, codes.FailedPrecondition},
	{cloud.ErrInUse, codes.FailedPrecondition},
	{cloud.ErrConflict, codes.FailedPrecondition},
	{cloud.ErrPermissionDenied, codes.PermissionDenied},
	{cloud.ErrUnsupported, codes.InvalidArgument},
	{cloud.ErrRetryLater, codes.Unavailable},
	{cloud.ErrInProgress, codes.DeadlineExceeded},
	{cloud.ErrUnavailable, codes.Unavailable},
	// KMS, for volumes whose LUKS key it wraps: a key the controller may
	// not use, a disabled one, a source key that is not its volume's, a
	// missing one (the StorageClass names it), KMS failing.
	{datakeys.ErrAccessDenied, codes.PermissionDenied},
	{datakeys.ErrKeyDisabled, codes.FailedPrecondition},
	{datakeys.ErrWrongVolume, codes.FailedPrecondition},
	{datakeys.ErrKeyNotFound, codes.InvalidArgument},
	{datakeys.ErrInvalidArgument, codes.InvalidArgument},
	{datakeys.ErrUnavailable, codes.Unavailable},
}

// codeFor picks the gRPC code for an error from the cloud or the
// controller's own helpers.
func codeFor(err error) codes.Code {
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return s.Code()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, coalescer.ErrClosed):
		return codes.Unavailable
	}
	var perr *parameters.Error
	if errors.As(err, &perr) {
		return codes.InvalidArgument
	}
	for _, m := range cloudCodes {
		if errors.Is(err, m.err) {
			return m.code
		}
	}
	return codes.Internal
}

// failed turns err into a gRPC status error whose message starts with what
// the controller was doing, in the user's terms ("create volume
// "pvc-1": …"), and keeps the cloud's own explanation.
func failed(err error, format string, args ...any) error {
	msg := err.Error()
	if s, ok := status.FromError(err); ok {
		msg = s.Message()
	}
	return status.Errorf(codeFor(err), "%s: %s", fmt.Sprintf(format, args...), msg)
}

// invalidArgument is the answer to a request that is wrong in itself.
func invalidArgument(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// busy is the answer to a concurrent duplicate of a request still running:
// the sidecar retries later and then sees the finished result.
func busy(key inflight.Key) error {
	return status.Errorf(codes.Aborted, "an operation on %s is already in progress; retry later", key)
}
