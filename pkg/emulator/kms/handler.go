// Package kms serves the emulator's AWS Key Management Service: the JSON
// 1.1 protocol (POST /, X-Amz-Target: TrentService.<Operation>) with the
// operations a volume-encryption workflow needs — CreateKey, DescribeKey,
// GenerateDataKey, GenerateDataKeyWithoutPlaintext, Encrypt, Decrypt,
// ReEncrypt, EnableKey, DisableKey, GetKeyPolicy and PutKeyPolicy — over
// symmetric keys whose ciphertexts bind their encryption context.
//
// Unlike the emulator's EC2 endpoint, KMS authenticates: every request's
// SigV4 signature is verified against the IAM store's credentials (those
// STS issued for a web identity, or declared access keys), and each
// operation is authorized as KMS does: the key's policy allows the caller's
// role (or user) outright, or allows the caller's account and the role's
// identity-based policies allow it too; an explicit deny in either
// refuses. Anything else is AccessDeniedException, worded as AWS words it.
package kms

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/servicemetrics"
)

// TargetPrefix starts the X-Amz-Target of every KMS request.
const TargetPrefix = "TrentService."

// service labels KMS's requests in the emulator's metrics and is the
// signing name credentials must be scoped to.
const service = "kms"

// maxRequestBytes bounds a request body (KMS takes at most 4 KiB of plaintext).
const maxRequestBytes = 64 << 10

// IsRequest reports whether a request is addressed to KMS.
func IsRequest(r *http.Request) bool {
	return strings.HasPrefix(r.Header.Get("X-Amz-Target"), TargetPrefix)
}

// handler is the KMS endpoint.
type handler struct {
	keys    *Store
	iam     *iam.Store
	metrics *servicemetrics.Metrics
	now     func() time.Time
}

// NewHandler returns the KMS endpoint over a key store, authenticating
// callers with the IAM store; metrics may be nil.
func NewHandler(keys *Store, store *iam.Store, metrics *servicemetrics.Metrics) http.Handler {
	return &handler{keys: keys, iam: store, metrics: metrics, now: time.Now}
}

// operation is one KMS operation: it decodes its own request and answers
// with a JSON-encodable value.
type operation func(h *handler, c iam.Caller, body []byte) (any, *iam.Error)

var operations = map[string]operation{
	"CreateKey":                       (*handler).createKey,
	"DescribeKey":                     (*handler).describeKey,
	"GenerateDataKey":                 (*handler).generateDataKey,
	"GenerateDataKeyWithoutPlaintext": (*handler).generateDataKeyWithoutPlaintext,
	"Encrypt":                         (*handler).encrypt,
	"Decrypt":                         (*handler).decrypt,
	"ReEncrypt":                       (*handler).reEncrypt,
	"EnableKey":                       (*handler).enableKey,
	"DisableKey":                      (*handler).disableKey,
	"GetKeyPolicy":                    (*handler).getKeyPolicy,
	"PutKeyPolicy":                    (*handler).putKeyPolicy,
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), TargetPrefix)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		h.fail(w, name, iam.Errorf("ValidationException", http.StatusBadRequest, "the request body could not be read: %v", err))
		return
	}
	op, ok := operations[name]
	if !ok || r.Method != http.MethodPost {
		h.fail(w, name, iam.Errorf("UnknownOperationException", http.StatusBadRequest, "the emulator's KMS does not answer %s", name))
		return
	}
	caller, apiErr := authenticate(r, body, h.iam, h.keys.region, service, h.now())
	if apiErr != nil {
		h.fail(w, name, apiErr)
		return
	}
	out, apiErr := op(h, caller, body)
	if apiErr != nil {
		h.fail(w, name, apiErr)
		return
	}
	b, err := json.Marshal(out)
	if err != nil {
		h.fail(w, name, iam.Errorf("KMSInternalException", http.StatusInternalServerError, "encode the answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Requestid", uuid.NewString())
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	h.metrics.Observe(service, name, "")
	klog.V(4).InfoS("KMS request", "operation", name, "caller", caller.ARN)
}

// fail answers with KMS's JSON error. Messages never hold plaintext.
func (h *handler) fail(w http.ResponseWriter, name string, e *iam.Error) {
	b, _ := json.Marshal(map[string]string{"__type": e.Code, "message": e.Message})
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Requestid", uuid.NewString())
	w.WriteHeader(e.Status)
	_, _ = w.Write(b)
	h.metrics.Observe(service, name, e.Code)
	klog.V(2).InfoS("KMS request refused", "operation", name, "type", e.Code, "message", e.Message)
}

// decode reads a request document; unknown fields are ignored, as KMS
// ignores fields newer SDKs send.
func decode(body []byte, v any) *iam.Error {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return iam.Errorf("SerializationException", http.StatusBadRequest, "the request is not valid JSON for this operation: %v", err)
	}
	return nil
}

// authorize finds a key and checks that its policy allows the caller
// action on it with the encryption context ctx (its pairs are the
// kms:EncryptionContext:<key> condition keys).
func (h *handler) authorize(c iam.Caller, ref, action string, ctx map[string]string) (*key, *iam.Error) {
	if ref == "" {
		return nil, iam.Errorf("ValidationException", http.StatusBadRequest, "1 validation error detected: Value null at 'keyId' failed to satisfy constraint: Member must not be null")
	}
	h.keys.mu.Lock()
	defer h.keys.mu.Unlock()
	k, err := h.keys.resolveLocked(ref)
	if err != nil {
		what := "Key"
		if strings.Contains(ref, "alias/") {
			what = "Alias"
		}
		return nil, iam.Errorf("NotFoundException", http.StatusBadRequest, "%s '%s' does not exist", what, ref)
	}
	conditions := map[string]string{"kms:CallerAccount": c.Account, "aws:PrincipalArn": c.PrincipalARN}
	for key, value := range ctx {
		conditions["kms:EncryptionContext:"+key] = value
	}
	arn := h.keys.arn(k.ID)
	req := iam.Request{Principals: c.Principals, Account: c.Account, Action: action, Resource: arn, Context: conditions}
	if why := refusal(k.Policy.Decide(req), c.Decide(req), action); why != "" {
		return nil, iam.Errorf("AccessDeniedException", http.StatusBadRequest,
			"User: %s is not authorized to perform: %s on resource: %s %s", c.ARN, action, arn, why)
	}
	return k, nil
}

// refusal is why KMS refuses a request its key policy and the caller's
// identity-based policies decided so (empty when it allows it), as AWS
// words it: an explicit deny in either refuses; the key policy allowing
// the caller outright allows; a key policy that allows only the caller's
// account (its root: "Enable IAM User Permissions") needs an
// identity-based policy that allows the request too.
func refusal(key, identity iam.Decision, action string) string {
	switch {
	case key == iam.Denied:
		return "with an explicit deny in a resource-based policy"
	case identity == iam.Denied:
		return "with an explicit deny in an identity-based policy"
	case key == iam.Allowed, key == iam.AllowedToAccount && identity == iam.Allowed:
		return ""
	case key == iam.AllowedToAccount:
		return "because no identity-based policy allows the " + action + " action"
	}
	return "because no resource-based policy allows the " + action + " action"
}

// requireEnabled refuses a cryptographic operation with a disabled key.
func (h *handler) requireEnabled(k *key) *iam.Error {
	h.keys.mu.Lock()
	defer h.keys.mu.Unlock()
	if !k.Enabled {
		return iam.Errorf("DisabledException", http.StatusBadRequest, "%s is disabled.", h.keys.arn(k.ID))
	}
	return nil
}

// checkAlgorithm accepts the one algorithm of symmetric keys.
func checkAlgorithm(alg string) *iam.Error {
	if alg != "" && alg != "SYMMETRIC_DEFAULT" {
		return iam.Errorf("InvalidKeyUsageException", http.StatusBadRequest, "the algorithm %s is not valid for a symmetric key", alg)
	}
	return nil
}

func dryRun(on bool) *iam.Error {
	if on {
		return iam.Errorf("DryRunOperationException", http.StatusPreconditionFailed, "The request would have succeeded, but the DryRun option is set.")
	}
	return nil
}

type keyMetadata struct {
	AWSAccountID          string   `json:"AWSAccountId"`
	KeyID                 string   `json:"KeyId"`
	Arn                   string   `json:"Arn"`
	CreationDate          float64  `json:"CreationDate"`
	Enabled               bool     `json:"Enabled"`
	Description           string   `json:"Description"`
	KeyUsage              string   `json:"KeyUsage"`
	KeyState              string   `json:"KeyState"`
	Origin                string   `json:"Origin"`
	KeyManager            string   `json:"KeyManager"`
	CustomerMasterKeySpec string   `json:"CustomerMasterKeySpec"`
	KeySpec               string   `json:"KeySpec"`
	EncryptionAlgorithms  []string `json:"EncryptionAlgorithms"`
	MultiRegion           bool     `json:"MultiRegion"`
}

func (h *handler) metadata(k *key) keyMetadata {
	h.keys.mu.Lock()
	defer h.keys.mu.Unlock()
	state := "Enabled"
	if !k.Enabled {
		state = "Disabled"
	}
	return keyMetadata{AWSAccountID: h.keys.account, KeyID: k.ID, Arn: h.keys.arn(k.ID), CreationDate: float64(k.CreationDate.Unix()),
		Enabled: k.Enabled, Description: k.Description, KeyUsage: "ENCRYPT_DECRYPT", KeyState: state, Origin: "AWS_KMS",
		KeyManager: "CUSTOMER", CustomerMasterKeySpec: "SYMMETRIC_DEFAULT", KeySpec: "SYMMETRIC_DEFAULT",
		EncryptionAlgorithms: []string{"SYMMETRIC_DEFAULT"}}
}

func (h *handler) createKey(c iam.Caller, body []byte) (any, *iam.Error) {
	var in struct {
		Policy, Description, KeyUsage, KeySpec, CustomerMasterKeySpec, Origin string
		MultiRegion                                                           bool
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	switch {
	case in.KeyUsage != "" && in.KeyUsage != "ENCRYPT_DECRYPT",
		in.KeySpec != "" && in.KeySpec != "SYMMETRIC_DEFAULT",
		in.CustomerMasterKeySpec != "" && in.CustomerMasterKeySpec != "SYMMETRIC_DEFAULT":
		return nil, iam.Errorf("UnsupportedOperationException", http.StatusBadRequest, "the emulator's KMS makes symmetric encryption keys only (SYMMETRIC_DEFAULT, ENCRYPT_DECRYPT)")
	case in.Origin != "" && in.Origin != "AWS_KMS", in.MultiRegion:
		return nil, iam.Errorf("UnsupportedOperationException", http.StatusBadRequest, "the emulator's KMS makes single-region keys with AWS_KMS key material only")
	}
	spec := KeySpec{Description: in.Description}
	if in.Policy != "" {
		p, err := iam.ParsePolicy([]byte(in.Policy))
		if err != nil {
			return nil, iam.Errorf("MalformedPolicyDocumentException", http.StatusBadRequest, "%v", err)
		}
		spec.Policy = p
	}
	info, err := h.keys.Declare(spec)
	if err != nil {
		return nil, iam.Errorf("KMSInternalException", http.StatusInternalServerError, "%v", err)
	}
	klog.V(2).InfoS("KMS key created", "keyID", info.ID, "caller", c.ARN)
	h.keys.mu.Lock()
	k := h.keys.keys[info.ID]
	h.keys.mu.Unlock()
	return map[string]keyMetadata{"KeyMetadata": h.metadata(k)}, nil
}

type keyRequest struct {
	KeyID string `json:"KeyId"`
}

func (h *handler) describeKey(c iam.Caller, body []byte) (any, *iam.Error) {
	var in keyRequest
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	k, err := h.authorize(c, in.KeyID, "kms:DescribeKey", nil)
	if err != nil {
		return nil, err
	}
	return map[string]keyMetadata{"KeyMetadata": h.metadata(k)}, nil
}

type dataKeyRequest struct {
	KeyID             string            `json:"KeyId"`
	KeySpec           string            `json:"KeySpec"`
	NumberOfBytes     int               `json:"NumberOfBytes"`
	EncryptionContext map[string]string `json:"EncryptionContext"`
	DryRun            bool              `json:"DryRun"`
	Recipient         json.RawMessage   `json:"Recipient"`
}

// dataKey makes a random data key and seals it: the work of both
// GenerateDataKey operations, which differ only in what they answer.
func (h *handler) dataKey(c iam.Caller, body []byte, action string) (*key, []byte, []byte, *iam.Error) {
	var in dataKeyRequest
	if err := decode(body, &in); err != nil {
		return nil, nil, nil, err
	}
	if len(in.Recipient) > 0 && string(in.Recipient) != "null" {
		return nil, nil, nil, iam.Errorf("UnsupportedOperationException", http.StatusBadRequest, "the emulator's KMS has no Nitro enclave recipients")
	}
	size := 0
	switch {
	case in.KeySpec != "" && in.NumberOfBytes != 0:
		return nil, nil, nil, iam.Errorf("ValidationException", http.StatusBadRequest, "KeySpec and NumberOfBytes exclude each other")
	case in.KeySpec == "AES_256":
		size = 32
	case in.KeySpec == "AES_128":
		size = 16
	case in.KeySpec != "":
		return nil, nil, nil, iam.Errorf("ValidationException", http.StatusBadRequest, "KeySpec %q: want AES_256 or AES_128", in.KeySpec)
	case in.NumberOfBytes >= 1 && in.NumberOfBytes <= 1024:
		size = in.NumberOfBytes
	default:
		return nil, nil, nil, iam.Errorf("ValidationException", http.StatusBadRequest, "give KeySpec (AES_256, AES_128) or NumberOfBytes (1 to 1024)")
	}
	k, err := h.authorize(c, in.KeyID, action, in.EncryptionContext)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := h.requireEnabled(k); err != nil {
		return nil, nil, nil, err
	}
	if err := dryRun(in.DryRun); err != nil {
		return nil, nil, nil, err
	}
	plaintext := make([]byte, size)
	if _, err := rand.Read(plaintext); err != nil {
		return nil, nil, nil, iam.Errorf("KMSInternalException", http.StatusInternalServerError, "%v", err)
	}
	blob, sealErr := seal(k, plaintext, in.EncryptionContext)
	if sealErr != nil {
		return nil, nil, nil, iam.Errorf("KMSInternalException", http.StatusInternalServerError, "%v", sealErr)
	}
	return k, plaintext, blob, nil
}

func (h *handler) generateDataKey(c iam.Caller, body []byte) (any, *iam.Error) {
	k, plaintext, blob, err := h.dataKey(c, body, "kms:GenerateDataKey")
	if err != nil {
		return nil, err
	}
	return map[string]any{"KeyId": h.keys.arn(k.ID), "CiphertextBlob": blob, "Plaintext": plaintext}, nil
}

func (h *handler) generateDataKeyWithoutPlaintext(c iam.Caller, body []byte) (any, *iam.Error) {
	k, plaintext, blob, err := h.dataKey(c, body, "kms:GenerateDataKeyWithoutPlaintext")
	if err != nil {
		return nil, err
	}
	clear(plaintext)
	return map[string]any{"KeyId": h.keys.arn(k.ID), "CiphertextBlob": blob}, nil
}

func (h *handler) encrypt(c iam.Caller, body []byte) (any, *iam.Error) {
	var in struct {
		KeyID               string            `json:"KeyId"`
		Plaintext           []byte            `json:"Plaintext"`
		EncryptionContext   map[string]string `json:"EncryptionContext"`
		EncryptionAlgorithm string            `json:"EncryptionAlgorithm"`
		DryRun              bool              `json:"DryRun"`
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	defer clear(in.Plaintext)
	if len(in.Plaintext) == 0 || len(in.Plaintext) > 4096 {
		return nil, iam.Errorf("ValidationException", http.StatusBadRequest, "Plaintext must be 1 to 4096 bytes")
	}
	if err := checkAlgorithm(in.EncryptionAlgorithm); err != nil {
		return nil, err
	}
	k, err := h.authorize(c, in.KeyID, "kms:Encrypt", in.EncryptionContext)
	if err != nil {
		return nil, err
	}
	if err := h.requireEnabled(k); err != nil {
		return nil, err
	}
	if err := dryRun(in.DryRun); err != nil {
		return nil, err
	}
	blob, sealErr := seal(k, in.Plaintext, in.EncryptionContext)
	if sealErr != nil {
		return nil, iam.Errorf("KMSInternalException", http.StatusInternalServerError, "%v", sealErr)
	}
	return map[string]any{"KeyId": h.keys.arn(k.ID), "CiphertextBlob": blob, "EncryptionAlgorithm": "SYMMETRIC_DEFAULT"}, nil
}

// openBlob authorizes action on the key a blob names and opens it under
// ctx. keyRef, when given, must be that key (IncorrectKeyException otherwise).
func (h *handler) openBlob(c iam.Caller, blob []byte, keyRef string, ctx map[string]string, action string) (*key, []byte, *iam.Error) {
	id, err := blobKeyID(blob)
	if err != nil {
		return nil, nil, iam.Errorf("InvalidCiphertextException", http.StatusBadRequest, "%v", err)
	}
	k, apiErr := h.authorize(c, id, action, ctx)
	if apiErr != nil {
		if apiErr.Code == "NotFoundException" {
			return nil, nil, iam.Errorf("InvalidCiphertextException", http.StatusBadRequest, "%v", errBadCiphertext)
		}
		return nil, nil, apiErr
	}
	if keyRef != "" {
		h.keys.mu.Lock()
		named, err := h.keys.resolveLocked(keyRef)
		h.keys.mu.Unlock()
		if err != nil || named.ID != k.ID {
			return nil, nil, iam.Errorf("IncorrectKeyException", http.StatusBadRequest,
				"The key ID in the request does not identify a KMS key that can perform this operation.")
		}
	}
	if err := h.requireEnabled(k); err != nil {
		return nil, nil, err
	}
	plaintext, err := open(k, blob, ctx)
	if err != nil {
		return nil, nil, iam.Errorf("InvalidCiphertextException", http.StatusBadRequest, "%v", err)
	}
	return k, plaintext, nil
}

func (h *handler) decrypt(c iam.Caller, body []byte) (any, *iam.Error) {
	var in struct {
		CiphertextBlob      []byte            `json:"CiphertextBlob"`
		EncryptionContext   map[string]string `json:"EncryptionContext"`
		KeyID               string            `json:"KeyId"`
		EncryptionAlgorithm string            `json:"EncryptionAlgorithm"`
		DryRun              bool              `json:"DryRun"`
		Recipient           json.RawMessage   `json:"Recipient"`
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if len(in.Recipient) > 0 && string(in.Recipient) != "null" {
		return nil, iam.Errorf("UnsupportedOperationException", http.StatusBadRequest, "the emulator's KMS has no Nitro enclave recipients")
	}
	if err := checkAlgorithm(in.EncryptionAlgorithm); err != nil {
		return nil, err
	}
	k, plaintext, err := h.openBlob(c, in.CiphertextBlob, in.KeyID, in.EncryptionContext, "kms:Decrypt")
	if err != nil {
		return nil, err
	}
	if err := dryRun(in.DryRun); err != nil {
		clear(plaintext)
		return nil, err
	}
	return map[string]any{"KeyId": h.keys.arn(k.ID), "Plaintext": plaintext, "EncryptionAlgorithm": "SYMMETRIC_DEFAULT"}, nil
}

func (h *handler) reEncrypt(c iam.Caller, body []byte) (any, *iam.Error) {
	var in struct {
		CiphertextBlob                 []byte            `json:"CiphertextBlob"`
		SourceEncryptionContext        map[string]string `json:"SourceEncryptionContext"`
		SourceKeyID                    string            `json:"SourceKeyId"`
		DestinationKeyID               string            `json:"DestinationKeyId"`
		DestinationEncryptionContext   map[string]string `json:"DestinationEncryptionContext"`
		SourceEncryptionAlgorithm      string            `json:"SourceEncryptionAlgorithm"`
		DestinationEncryptionAlgorithm string            `json:"DestinationEncryptionAlgorithm"`
		DryRun                         bool              `json:"DryRun"`
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	for _, alg := range []string{in.SourceEncryptionAlgorithm, in.DestinationEncryptionAlgorithm} {
		if err := checkAlgorithm(alg); err != nil {
			return nil, err
		}
	}
	src, plaintext, err := h.openBlob(c, in.CiphertextBlob, in.SourceKeyID, in.SourceEncryptionContext, "kms:ReEncryptFrom")
	if err != nil {
		return nil, err
	}
	defer clear(plaintext)
	dst, err := h.authorize(c, in.DestinationKeyID, "kms:ReEncryptTo", in.DestinationEncryptionContext)
	if err != nil {
		return nil, err
	}
	if err := h.requireEnabled(dst); err != nil {
		return nil, err
	}
	if err := dryRun(in.DryRun); err != nil {
		return nil, err
	}
	blob, sealErr := seal(dst, plaintext, in.DestinationEncryptionContext)
	if sealErr != nil {
		return nil, iam.Errorf("KMSInternalException", http.StatusInternalServerError, "%v", sealErr)
	}
	return map[string]any{"CiphertextBlob": blob, "SourceKeyId": h.keys.arn(src.ID), "KeyId": h.keys.arn(dst.ID),
		"SourceEncryptionAlgorithm": "SYMMETRIC_DEFAULT", "DestinationEncryptionAlgorithm": "SYMMETRIC_DEFAULT"}, nil
}

// setEnabled is EnableKey and DisableKey.
func (h *handler) setEnabled(c iam.Caller, body []byte, action string, enabled bool) (any, *iam.Error) {
	var in keyRequest
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	k, err := h.authorize(c, in.KeyID, action, nil)
	if err != nil {
		return nil, err
	}
	h.keys.mu.Lock()
	defer h.keys.mu.Unlock()
	k.Enabled = enabled
	if err := h.keys.saveLocked(); err != nil {
		return nil, iam.Errorf("KMSInternalException", http.StatusInternalServerError, "%v", err)
	}
	klog.V(2).InfoS("KMS key state changed", "keyID", k.ID, "enabled", enabled, "caller", c.ARN)
	return struct{}{}, nil
}

func (h *handler) enableKey(c iam.Caller, body []byte) (any, *iam.Error) {
	return h.setEnabled(c, body, "kms:EnableKey", true)
}

func (h *handler) disableKey(c iam.Caller, body []byte) (any, *iam.Error) {
	return h.setEnabled(c, body, "kms:DisableKey", false)
}

type policyRequest struct {
	KeyID      string `json:"KeyId"`
	PolicyName string `json:"PolicyName"`
	Policy     string `json:"Policy"`
}

// checkPolicyName accepts KMS's only key policy name.
func checkPolicyName(name string) *iam.Error {
	if name != "" && name != "default" {
		return iam.Errorf("NotFoundException", http.StatusBadRequest, "No such policy exists: %s (a key has one policy, default)", name)
	}
	return nil
}

func (h *handler) getKeyPolicy(c iam.Caller, body []byte) (any, *iam.Error) {
	var in policyRequest
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if err := checkPolicyName(in.PolicyName); err != nil {
		return nil, err
	}
	k, err := h.authorize(c, in.KeyID, "kms:GetKeyPolicy", nil)
	if err != nil {
		return nil, err
	}
	h.keys.mu.Lock()
	doc, jerr := json.Marshal(k.Policy)
	h.keys.mu.Unlock()
	if jerr != nil {
		return nil, iam.Errorf("KMSInternalException", http.StatusInternalServerError, "%v", jerr)
	}
	return map[string]string{"Policy": string(doc), "PolicyName": "default"}, nil
}

func (h *handler) putKeyPolicy(c iam.Caller, body []byte) (any, *iam.Error) {
	var in policyRequest
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if err := checkPolicyName(in.PolicyName); err != nil {
		return nil, err
	}
	p, perr := iam.ParsePolicy([]byte(in.Policy))
	if perr != nil {
		return nil, iam.Errorf("MalformedPolicyDocumentException", http.StatusBadRequest, "%v", perr)
	}
	k, err := h.authorize(c, in.KeyID, "kms:PutKeyPolicy", nil)
	if err != nil {
		return nil, err
	}
	h.keys.mu.Lock()
	defer h.keys.mu.Unlock()
	k.Policy = p
	if err := h.keys.saveLocked(); err != nil {
		return nil, iam.Errorf("KMSInternalException", http.StatusInternalServerError, "%v", err)
	}
	klog.V(2).InfoS("KMS key policy replaced", "keyID", k.ID, "caller", c.ARN)
	return struct{}{}, nil
}
