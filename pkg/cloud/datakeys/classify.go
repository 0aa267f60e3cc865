package datakeys

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/smithy-go"
)

// errorCodes maps STS's and KMS's error codes to the sentinel errors.
var errorCodes = map[string]error{
	// STS
	"AccessDenied":            ErrTokenRefused,
	"InvalidIdentityToken":    ErrTokenRefused,
	"ExpiredTokenException":   ErrTokenRefused,
	"IDPRejectedClaim":        ErrTokenRefused,
	"RegionDisabledException": ErrTokenRefused,
	"IDPCommunicationError":   ErrUnavailable,
	"ValidationError":         ErrInvalidArgument,
	"MalformedPolicyDocument": ErrInvalidArgument,
	// KMS
	"AccessDeniedException":               ErrAccessDenied,
	"UnrecognizedClientException":         ErrAccessDenied,
	"InvalidSignatureException":           ErrAccessDenied,
	"IncompleteSignatureException":        ErrAccessDenied,
	"MissingAuthenticationTokenException": ErrAccessDenied,
	"DisabledException":                   ErrKeyDisabled,
	"KMSInvalidStateException":            ErrKeyDisabled,
	"NotFoundException":                   ErrKeyNotFound,
	"InvalidCiphertextException":          ErrWrongVolume,
	"IncorrectKeyException":               ErrWrongVolume,
	"ValidationException":                 ErrInvalidArgument,
	"InvalidKeyUsageException":            ErrInvalidArgument,
	"InvalidArnException":                 ErrInvalidArgument,
	"SerializationException":              ErrInvalidArgument,
	"KMSInternalException":                ErrUnavailable,
	"DependencyTimeoutException":          ErrUnavailable,
	"KeyUnavailableException":             ErrUnavailable,
	"ThrottlingException":                 ErrUnavailable,
}

// classify wraps an STS or KMS error in its sentinel error, with what was
// being done in front. The service's message stays: it is what an operator
// acts on ("… is not authorized to perform: kms:Decrypt on resource: …").
func classify(doing string, err error) error {
	if err == nil {
		return nil
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		sentinel, ok := errorCodes[apiErr.ErrorCode()]
		if !ok {
			sentinel = ErrUnexpected
		}
		return fmt.Errorf("%s: %w: %s: %s", doing, sentinel, apiErr.ErrorCode(), apiErr.ErrorMessage())
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w: %w", doing, ErrUnavailable, err)
	}
	// No answer at all: the network, TLS, the endpoint.
	return fmt.Errorf("%s: %w: %v", doing, ErrUnavailable, err)
}
