// Package datakeys is everything Diskplane asks of AWS KMS (and, on a node,
// of STS) for volumes that the node encrypts with LUKS under a key KMS
// wraps: the controller has KMS make a new volume key that it never sees
// in plaintext, and re-wraps a source's key for a restored or cloned volume;
// a node exchanges a pod's own service-account token for that pod's role's
// credentials and has KMS unwrap the volume's key with them. Every wrapped
// key is bound to its volume by an encryption context, so a key copied to
// another volume's context does not decrypt.
//
// Like package cloud, it speaks in the driver's terms and returns errors
// that wrap its sentinel errors; only the driver layer turns them into
// gRPC codes. No SDK type crosses it.
package datakeys

import (
	"context"
	"errors"
	"strings"
)

// The encryption context keys of a wrapped volume key. Key policies and
// IAM policies name them in conditions
// (kms:EncryptionContext:diskplane:namespace).
const (
	// EncryptionContextKey binds a wrapped volume key to its volume; its
	// value is the EBS volume ID.
	EncryptionContextKey = "diskplane:volume-id"
	// NamespaceContextKey binds it to the namespace of the claim the volume
	// was made for: a tenant's role conditioned on it unwraps only its own
	// namespace's keys, even when every tenant's keys share one KMS key.
	NamespaceContextKey = "diskplane:namespace"
)

// Binding is what a wrapped volume key is bound to by its encryption
// context. KMS decrypts it only with the same context, so the binding
// cannot be changed or dropped by whoever holds the ciphertext.
type Binding struct {
	VolumeID string
	// Namespace is the claim's namespace; empty for a key wrapped before
	// Diskplane bound keys to namespaces, or for a claim whose provisioner
	// does not pass it (--extra-create-metadata): such a key is bound to
	// its volume only.
	Namespace string
}

// EncryptionContext is the encryption context of a key with this binding.
func (b Binding) EncryptionContext() map[string]string {
	ctx := map[string]string{EncryptionContextKey: b.VolumeID}
	if b.Namespace != "" {
		ctx[NamespaceContextKey] = b.Namespace
	}
	return ctx
}

// String names the binding in messages and logs.
func (b Binding) String() string {
	if b.Namespace == "" {
		return "volume " + b.VolumeID
	}
	return "volume " + b.VolumeID + " in namespace " + b.Namespace
}

// Wrapped is a volume key as KMS encrypted it.
type Wrapped struct {
	// KeyARN is the KMS key that wraps it, as KMS names it (its ARN).
	KeyARN string
	// Ciphertext is KMS's ciphertext blob.
	Ciphertext []byte
}

// Wrapper is what the controller asks of KMS. It needs
// kms:GenerateDataKeyWithoutPlaintext and kms:ReEncrypt* on the keys of
// its StorageClasses, and never kms:Decrypt.
type Wrapper interface {
	// Generate has KMS make a random 256-bit key bound to to, wrapped by
	// keyID (an ID, ARN, alias or alias ARN), and returns it wrapped only.
	Generate(ctx context.Context, keyID string, to Binding) (Wrapped, error)
	// Rewrap re-encrypts a key bound to from under keyID bound to to,
	// inside KMS: a restored or cloned volume holds its source's LUKS
	// header, so it needs the same key bound to its own ID and claim.
	Rewrap(ctx context.Context, w Wrapped, from Binding, keyID string, to Binding) (Wrapped, error)
	// Check asks KMS, in a dry run that makes nothing, whether Generate
	// (source nil) or Rewrap of source (bound to from) with keyID for a
	// volume bound like to would succeed: before the volume exists, so a
	// key this controller cannot use fails without side effects.
	Check(ctx context.Context, keyID string, source *Wrapped, from, to Binding) error
}

// UnwrapRequest is one pod's request to unwrap a volume's key.
type UnwrapRequest struct {
	// Token is the pod's service-account token for STS's audience. It is a
	// credential: it is sent to STS and nowhere else.
	Token string
	// RoleARN is the role the pod assumes; SessionName names the session
	// in CloudTrail (the pod).
	RoleARN, SessionName string
	// KeyID is the KMS key the volume's key is wrapped by; Decrypt is told
	// to use exactly this key.
	KeyID string
	// Ciphertext is the wrapped key, Binding what it is bound to.
	Ciphertext []byte
	Binding    Binding
	// Region is where to call STS and KMS when KeyID is not an ARN (which
	// names its region): the node's own; empty means the configuration's.
	Region string
}

// Unwrapper is what a node asks of STS and KMS to unlock a volume for one
// pod. It holds no credentials of its own: each call assumes the pod's
// role with the pod's token.
type Unwrapper interface {
	// Unwrap returns the volume's plaintext key. The caller clears it once
	// it has used it.
	Unwrap(ctx context.Context, r UnwrapRequest) ([]byte, error)
}

// Sentinel errors. Every error of this package wraps one of them, keeping
// the service's own message.
var (
	// ErrTokenRefused: STS refused the token or the role (the role's trust
	// policy does not allow this service account, the token is expired or
	// not from an issuer IAM knows, its audience is wrong).
	ErrTokenRefused = errors.New("STS refused the web identity")
	// ErrAccessDenied: KMS refused the caller (the key policy does not
	// allow the role this operation with this volume's context).
	ErrAccessDenied = errors.New("KMS refused the caller")
	// ErrKeyDisabled: the KMS key is disabled or pending deletion.
	ErrKeyDisabled = errors.New("the KMS key is disabled")
	// ErrKeyNotFound: no KMS key has this ID, ARN or alias.
	ErrKeyNotFound = errors.New("the KMS key does not exist")
	// ErrWrongVolume: the wrapped key is not this volume's (its encryption
	// context or its KMS key differ): a volume context copied or edited.
	ErrWrongVolume = errors.New("the wrapped key does not belong to this volume")
	// ErrInvalidArgument: a parameter was refused (a malformed ARN, a
	// session name).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnavailable: STS or KMS could not be reached or kept failing
	// until the caller's deadline.
	ErrUnavailable = errors.New("unavailable")
	// ErrUnexpected: an error this package does not classify; the message
	// keeps the service's code.
	ErrUnexpected = errors.New("unexpected error")
)

// regionOf is the region of a KMS key ARN or alias ARN, or fallback for an
// ID or alias name: a key lives in one region, and so must the calls.
func regionOf(keyID, fallback string) string {
	parts := strings.SplitN(keyID, ":", 6)
	if len(parts) == 6 && parts[0] == "arn" && parts[2] == "kms" && parts[3] != "" {
		return parts[3]
	}
	return fallback
}
