package model

import "fmt"

// Error is a failure the emulated cloud reports to its caller with an EC2
// error code, so the API layer can answer with EC2's error envelope and a
// client's error classification sees exactly what EC2 would send.
type Error struct {
	// Code is the EC2 error code, e.g. InvalidVolume.NotFound.
	Code string
	// Message is the human-readable text EC2 puts beside the code.
	Message string
}

// Error renders the code and message the way the AWS SDKs print API errors.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// EC2 error codes the model returns. The names are EC2's own, so that a
// driver's error handling written against real EC2 behaves the same here.
const (
	CodeAttachmentLimitExceeded        = "AttachmentLimitExceeded"
	CodeDryRunOperation                = "DryRunOperation"
	CodeIdempotentParameterMismatch    = "IdempotentParameterMismatch"
	CodeIncorrectInstanceState         = "IncorrectInstanceState"
	CodeIncorrectModificationState     = "IncorrectModificationState"
	CodeIncorrectState                 = "IncorrectState"
	CodeInvalidAttachmentNotFound      = "InvalidAttachment.NotFound"
	CodeInvalidID                      = "InvalidID"
	CodeInvalidInstanceIDMalformed     = "InvalidInstanceID.Malformed"
	CodeInvalidInstanceIDNotFound      = "InvalidInstanceID.NotFound"
	CodeInvalidPaginationToken         = "InvalidPaginationToken"
	CodeInvalidParameterCombination    = "InvalidParameterCombination"
	CodeInvalidParameterDependency     = "InvalidParameterDependency"
	CodeInvalidParameterValue          = "InvalidParameterValue"
	CodeInvalidSnapshotIDMalformed     = "InvalidSnapshotID.Malformed"
	CodeInvalidSnapshotNotFound        = "InvalidSnapshot.NotFound"
	CodeInvalidVolumeIDMalformed       = "InvalidVolumeID.Malformed"
	CodeInvalidVolumeModNotFound       = "InvalidVolumeModification.NotFound"
	CodeInvalidVolumeNotFound          = "InvalidVolume.NotFound"
	CodeInvalidVolumeZoneMismatch      = "InvalidVolume.ZoneMismatch"
	CodeInvalidZoneNotFound            = "InvalidZone.NotFound"
	CodeMissingParameter               = "MissingParameter"
	CodeSnapshotLimitExceeded          = "SnapshotLimitExceeded"
	CodeTagLimitExceeded               = "TagLimitExceeded"
	CodeUnknownVolumeType              = "UnknownVolumeType"
	CodeVolumeInUse                    = "VolumeInUse"
	CodeVolumeLimitExceeded            = "VolumeLimitExceeded"
	CodeVolumeModificationRateExceeded = "VolumeModificationRateExceeded"
)

// dryRunError is what a mutating request with DryRun=true gets once every
// check has passed: EC2 reports success of a dry run as this error.
func dryRunError() *Error {
	return Errorf(CodeDryRunOperation, "Request would have succeeded, but DryRun flag is set.")
}
