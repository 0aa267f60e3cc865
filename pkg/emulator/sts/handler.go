// Package sts serves the emulator's AWS Security Token Service: the Query
// protocol (form-encoded POST, Version 2011-06-15, XML answers and STS's
// error envelope) with the one action a workload-identity client needs,
// AssumeRoleWithWebIdentity. It really verifies the token (signature with
// the OIDC provider's keys, issuer, audience, expiry) and the role's trust
// policy through the IAM store, and issues temporary credentials that the
// emulator's KMS then verifies signatures against. Like STS, the action
// takes no signature: the token is the credential.
package sts

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/servicemetrics"
)

// Version is the STS API version of the Query protocol.
const Version = "2011-06-15"

// Namespace is the XML namespace of STS's answers.
const Namespace = "https://sts.amazonaws.com/doc/2011-06-15/"

// service labels STS's requests in the emulator's metrics.
const service = "sts"

// maxRequestBytes bounds a request body (a token is at most 20,000 characters).
const maxRequestBytes = 64 << 10

// IsRequest reports whether a parsed Query request is addressed to STS: its
// Version is STS's (EC2's is 2016-11-15).
func IsRequest(form url.Values) bool { return form.Get("Version") == Version }

// handler is the STS endpoint.
type handler struct {
	iam     *iam.Store
	metrics *servicemetrics.Metrics
}

// NewHandler returns the STS endpoint over an IAM store; metrics may be nil.
func NewHandler(store *iam.Store, metrics *servicemetrics.Metrics) http.Handler {
	return &handler{iam: store, metrics: metrics}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reqID := uuid.NewString()
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBytes)
	if err := r.ParseForm(); err != nil {
		h.fail(w, "Unknown", reqID, &iam.Error{Code: "MalformedQueryString", Message: err.Error(), Status: http.StatusBadRequest})
		return
	}
	action := r.Form.Get("Action")
	if action != "AssumeRoleWithWebIdentity" {
		h.fail(w, action, reqID, &iam.Error{Code: "InvalidAction", Status: http.StatusBadRequest,
			Message: fmt.Sprintf("Could not find operation %s for version %s (the emulator's STS answers AssumeRoleWithWebIdentity)", action, Version)})
		return
	}
	in := iam.WebIdentityRequest{
		RoleARN:     r.Form.Get("RoleArn"),
		SessionName: r.Form.Get("RoleSessionName"),
		Token:       r.Form.Get("WebIdentityToken"),
	}
	if d := r.Form.Get("DurationSeconds"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil {
			h.fail(w, action, reqID, &iam.Error{Code: "ValidationError", Status: http.StatusBadRequest, Message: "DurationSeconds must be a number"})
			return
		}
		in.DurationSeconds = n
	}
	if r.Form.Get("Policy") != "" || r.Form.Get("PolicyArns.member.1.arn") != "" {
		// A session policy narrows what the credentials may do; answering
		// without applying it would grant more than asked.
		h.fail(w, action, reqID, &iam.Error{Code: "ValidationError", Status: http.StatusBadRequest,
			Message: "the emulator's STS does not apply session policies (Policy, PolicyArns)"})
		return
	}
	sess, err := h.iam.AssumeRoleWithWebIdentity(in)
	if err != nil {
		h.fail(w, action, reqID, err)
		return
	}
	var out response
	out.Result.Credentials = credentials{AccessKeyID: sess.AccessKeyID, SecretAccessKey: sess.SecretAccessKey,
		SessionToken: sess.SessionToken, Expiration: sess.Expiration.Format(time.RFC3339)}
	out.Result.SubjectFromWebIdentityToken = sess.Subject
	out.Result.AssumedRoleUser.Arn, out.Result.AssumedRoleUser.AssumedRoleID = sess.AssumedRoleARN, sess.AssumedRoleID
	out.Result.Provider, out.Result.Audience = sess.Provider, sess.Audience
	out.Metadata.RequestID = reqID
	out.Xmlns = Namespace
	body, err := xml.Marshal(out)
	if err != nil {
		h.fail(w, action, reqID, err)
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append([]byte(xml.Header), body...))
	h.metrics.Observe(service, action, "")
}

type credentials struct {
	AccessKeyID     string `xml:"AccessKeyId"`
	SecretAccessKey string `xml:"SecretAccessKey"`
	SessionToken    string `xml:"SessionToken"`
	Expiration      string `xml:"Expiration"`
}

type response struct {
	XMLName xml.Name `xml:"AssumeRoleWithWebIdentityResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Result  struct {
		Credentials                 credentials `xml:"Credentials"`
		SubjectFromWebIdentityToken string      `xml:"SubjectFromWebIdentityToken"`
		AssumedRoleUser             struct {
			Arn           string `xml:"Arn"`
			AssumedRoleID string `xml:"AssumedRoleId"`
		} `xml:"AssumedRoleUser"`
		Provider string `xml:"Provider"`
		Audience string `xml:"Audience"`
	} `xml:"AssumeRoleWithWebIdentityResult"`
	Metadata struct {
		RequestID string `xml:"RequestId"`
	} `xml:"ResponseMetadata"`
}

type errorResponse struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Error   struct {
		Type    string `xml:"Type"`
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	} `xml:"Error"`
	RequestID string `xml:"RequestId"`
}

// fail answers with STS's error envelope. The message never holds the
// token: the IAM store's refusals do not repeat it.
func (h *handler) fail(w http.ResponseWriter, action, reqID string, err error) {
	var e *iam.Error
	if !errors.As(err, &e) {
		klog.ErrorS(err, "STS request failed inside the emulator", "action", action, "requestID", reqID)
		e = &iam.Error{Code: "InternalFailure", Message: "An internal error has occurred.", Status: http.StatusInternalServerError}
	}
	var doc errorResponse
	doc.Xmlns = Namespace
	doc.Error.Type, doc.Error.Code, doc.Error.Message, doc.RequestID = "Sender", e.Code, e.Message, reqID
	if e.Status >= http.StatusInternalServerError {
		doc.Error.Type = "Receiver"
	}
	var body bytes.Buffer
	body.WriteString(xml.Header)
	if err := xml.NewEncoder(&body).Encode(doc); err != nil {
		body.Reset()
		body.WriteString("<ErrorResponse><Error><Code>InternalFailure</Code></Error></ErrorResponse>")
	}
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(e.Status)
	_, _ = w.Write(body.Bytes())
	h.metrics.Observe(service, action, e.Code)
	klog.V(2).InfoS("STS request refused", "action", action, "requestID", reqID, "code", e.Code, "message", e.Message)
}
