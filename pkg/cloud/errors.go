package cloud

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors of the cloud layer. Every error a Cloud method returns
// wraps one of them (with %w, keeping the cloud's own message), and only the
// driver layer turns them into gRPC status codes.
var (
	// ErrNotFound: the volume, snapshot or instance does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: a resource with this name exists with other parameters.
	ErrAlreadyExists = errors.New("already exists")
	// ErrIdempotentParameterMismatch: EC2 refused a ClientToken reused with other parameters.
	ErrIdempotentParameterMismatch = errors.New("idempotent parameter mismatch")
	// ErrInvalidArgument: the cloud rejected a parameter (bad size, IOPS, type, zone, …).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrLimitExceeded: an account, volume or instance attachment limit was reached.
	ErrLimitExceeded = errors.New("limit exceeded")
	// ErrAttachedElsewhere: the volume is attached to another instance.
	ErrAttachedElsewhere = errors.New("volume is attached to another instance")
	// ErrInUse: the resource is in use (e.g. deleting an attached volume).
	ErrInUse = errors.New("in use")
	// ErrConflict: the resource is not in a state that allows the request now
	// (e.g. a modification within the cool-down of a previous one).
	ErrConflict = errors.New("conflicting state")
	// ErrUnavailable: the cloud could not be reached or kept failing until the caller's deadline.
	ErrUnavailable = errors.New("cloud unavailable")
	// ErrInProgress: the cloud accepted the request, but the resource had not
	// reached the wanted state (available, attached, detached, modified)
	// when the caller's deadline came. The work goes on in the cloud; the
	// same call again continues waiting where this one stopped.
	ErrInProgress = errors.New("still in progress")
	// ErrRetryLater: the cloud cannot give a safe answer yet. What an
	// earlier attempt may have made does not show in EC2's eventually
	// consistent reads yet, or what it made failed and the next attempt
	// makes it anew. It is not a failure of the request: the same call
	// later goes on from where this one stopped.
	ErrRetryLater = errors.New("try again later")
	// ErrPermissionDenied: the cloud refused the credentials, or their policy
	// does not allow the call (a KMS key included). Retrying does not help;
	// an operator has to fix the IAM policy or the credentials.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrUnsupported: the cloud does not offer the action at all (EC2's
	// InvalidAction or UnsupportedOperation), as an EC2-API cloud may lack a
	// newer action such as DescribeVolumeStatus or CopyVolumes. Asking again
	// cannot help.
	ErrUnsupported = errors.New("not supported by this cloud")
	// ErrUnexpected: the cloud failed in a way the cloud layer does not
	// classify; the message keeps the cloud's error code so it can be added.
	ErrUnexpected = errors.New("unexpected cloud error")
)

// AttachedElsewhereError names the instances a volume is attached to, so the
// user sees where it is (e.g. a pod still running on an old node).
type AttachedElsewhereError struct {
	VolumeID    string
	InstanceIDs []string
}

// Error says where the volume is attached.
func (e *AttachedElsewhereError) Error() string {
	return fmt.Sprintf("volume %s is attached to instance %s", e.VolumeID, strings.Join(e.InstanceIDs, ", "))
}

// Unwrap makes errors.Is(err, ErrAttachedElsewhere) true.
func (e *AttachedElsewhereError) Unwrap() error { return ErrAttachedElsewhere }
