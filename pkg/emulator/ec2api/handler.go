// Package ec2api serves the EC2 Query API over the emulator's cloud model:
// form-encoded POST (or GET) requests with Action and Version, XML answers
// in the EC2 2016-11-15 namespace, and EC2's error envelope with EC2's
// error codes and HTTP statuses. An unmodified aws-sdk-go-v2 EC2 client
// pointed at it (AWS_ENDPOINT_URL_EC2) works as against EC2. Signatures are
// not checked: any credentials are accepted.
package ec2api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// Namespace is the XML namespace of EC2 API version 2016-11-15.
const Namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"

// maxRequestBytes bounds a request body; EC2 requests are small.
const maxRequestBytes = 1 << 20

// Options are the optional parts of the handler.
type Options struct {
	// Faults, when set, is consulted before every request.
	Faults *faults.Faults
	// Metrics, when set, counts and times every request.
	Metrics *Metrics
	// Keys, when set, is the KMS whose keys an encrypted volume's KmsKeyId
	// must name (existing and enabled).
	Keys *kms.Store
}

// handler is the EC2 endpoint.
type handler struct {
	cloud   *model.Cloud
	faults  *faults.Faults
	metrics *Metrics
	keys    *kms.Store
}

// action is one supported EC2 action.
type action struct {
	serve func(h *handler, p params) (requestIDSetter, error)
	// mutating actions use the mutating throttle bucket and honour DryRun
	// inside the model, after their own checks.
	mutating bool
}

// actions are the EC2 actions the emulator answers; any other is
// InvalidAction.
var actions = map[string]action{
	"CreateVolume":                 {serve: (*handler).createVolume, mutating: true},
	"DeleteVolume":                 {serve: (*handler).deleteVolume, mutating: true},
	"DescribeVolumes":              {serve: (*handler).describeVolumes},
	"AttachVolume":                 {serve: (*handler).attachVolume, mutating: true},
	"DetachVolume":                 {serve: (*handler).detachVolume, mutating: true},
	"ModifyVolume":                 {serve: (*handler).modifyVolume, mutating: true},
	"DescribeVolumesModifications": {serve: (*handler).describeVolumesModifications},
	"DescribeVolumeStatus":         {serve: (*handler).describeVolumeStatus},
	"CopyVolumes":                  {serve: (*handler).copyVolumes, mutating: true},
	"CreateSnapshot":               {serve: (*handler).createSnapshot, mutating: true},
	"DeleteSnapshot":               {serve: (*handler).deleteSnapshot, mutating: true},
	"DescribeSnapshots":            {serve: (*handler).describeSnapshots},
	"CreateTags":                   {serve: (*handler).createTags, mutating: true},
	"DeleteTags":                   {serve: (*handler).deleteTags, mutating: true},
	"DescribeTags":                 {serve: (*handler).describeTags},
	"DescribeInstances":            {serve: (*handler).describeInstances},
	"DescribeInstanceStatus":       {serve: (*handler).describeInstanceStatus},
	"StopInstances":                {serve: (*handler).stopInstances, mutating: true},
	"StartInstances":               {serve: (*handler).startInstances, mutating: true},
	"TerminateInstances":           {serve: (*handler).terminateInstances, mutating: true},
	"DescribeInstanceTypes":        {serve: (*handler).describeInstanceTypes},
	"DescribeAvailabilityZones":    {serve: (*handler).describeAvailabilityZones},
}

// Actions lists the supported action names.
func Actions() []string {
	out := make([]string, 0, len(actions))
	for a := range actions {
		out = append(out, a)
	}
	return out
}

// NewHandler returns the EC2 API handler for cloud.
func NewHandler(cloud *model.Cloud, opts Options) http.Handler {
	return &handler{cloud: cloud, faults: opts.Faults, metrics: opts.Metrics, keys: opts.Keys}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	reqID := newRequestID()
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBytes)
	if err := r.ParseForm(); err != nil {
		h.fail(w, "Unknown", reqID, start, model.Errorf("MalformedQueryString", "The request could not be parsed: %v", err))
		return
	}
	p := params{v: r.Form}
	name := p.str("Action")
	act, ok := actions[name]
	switch {
	case name == "":
		h.fail(w, "Unknown", reqID, start, model.Errorf("MissingAction", "The request must contain the parameter Action"))
		return
	case !ok:
		h.fail(w, "Unknown", reqID, start, model.Errorf("InvalidAction", "The action %s is not valid for this web service.", name))
		return
	}
	if injected := h.injectFault(r.Context(), name, act, p); injected != nil {
		h.fail(w, name, reqID, start, injected)
		return
	}
	if !act.mutating {
		// A read changes nothing, so a dry run of one succeeds once the
		// caller is authorized (the faults above).
		dry, err := p.boolv("DryRun")
		if err == nil && dry {
			err = model.Errorf(model.CodeDryRunOperation, "Request would have succeeded, but DryRun flag is set.")
		}
		if err != nil {
			h.fail(w, name, reqID, start, err)
			return
		}
	}
	out, err := act.serve(h, p)
	if err != nil {
		h.fail(w, name, reqID, start, err)
		return
	}
	if act.mutating && h.faults != nil {
		if rule := h.faults.AfterCommit(name); rule != nil {
			h.failAfterCommit(w, r, name, reqID, start, rule)
			return
		}
	}
	out.setRequestID(reqID)
	var body bytes.Buffer
	body.WriteString(xml.Header)
	root := xml.StartElement{
		Name: xml.Name{Local: name + "Response"},
		Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: Namespace}},
	}
	if err := xml.NewEncoder(&body).EncodeElement(out, root); err != nil {
		h.fail(w, name, reqID, start, fmt.Errorf("encode %s response: %w", name, err))
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body.Bytes())
	h.metrics.observe(name, "", time.Since(start).Seconds())
	h.metrics.observeRead(name, p.v)
	klog.V(4).InfoS("EC2 request", "action", name, "requestID", reqID, "duration", time.Since(start))
}

// injectFault runs the fault injector for one request.
func (h *handler) injectFault(ctx context.Context, name string, act action, p params) error {
	if h.faults == nil {
		return nil
	}
	class := faults.Mutating
	if !act.mutating {
		class = faults.UnfilteredDescribe
		if p.narrowed() {
			class = faults.Describe
		}
	}
	if injected := h.faults.Before(ctx, name, class); injected != nil {
		return model.Errorf(injected.Code, "%s", injected.Message)
	}
	return nil
}

// failAfterCommit fails a request the cloud has already applied, as the
// commit-then-fail fault asks: an error answer, a reset connection, or no
// answer until the client gives up (or the rule's stall has passed). The
// client cannot tell the change was made; only its retry or a later read
// shows it.
func (h *handler) failAfterCommit(w http.ResponseWriter, r *http.Request, name, reqID string, start time.Time, rule *faults.CommitFailRule) {
	switch rule.Mode {
	case faults.FailInternalError, faults.FailUnavailable:
		h.fail(w, name, reqID, start, model.Errorf(rule.Mode, "%s", faults.ErrorMessage(rule.Mode)))
		return
	case faults.FailStall:
		t := time.NewTimer(time.Duration(rule.Stall))
		select {
		case <-r.Context().Done():
		case <-t.C:
		}
		t.Stop()
	}
	h.metrics.observe(name, rule.Mode, time.Since(start).Seconds())
	klog.V(4).InfoS("EC2 request applied, then its connection dropped", "action", name, "requestID", reqID, "mode", rule.Mode)
	dropConnection(w)
}

// dropConnection closes the request's connection without an answer: with a
// TCP reset where it can take the connection over, else by aborting the
// response.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// errorResponse is EC2's error envelope.
type errorResponse struct {
	XMLName xml.Name `xml:"Response"`
	Errors  struct {
		Error struct {
			Code    string `xml:"Code"`
			Message string `xml:"Message"`
		} `xml:"Error"`
	} `xml:"Errors"`
	RequestID string `xml:"RequestID"`
}

// fail answers with EC2's error envelope. An error that is not a model
// error is the emulator's own failure and answers InternalError.
func (h *handler) fail(w http.ResponseWriter, name, reqID string, start time.Time, err error) {
	var me *model.Error
	if !errors.As(err, &me) {
		klog.ErrorS(err, "EC2 request failed inside the emulator", "action", name, "requestID", reqID)
		me = model.Errorf("InternalError", "An internal error has occurred.")
	}
	var doc errorResponse
	doc.Errors.Error.Code, doc.Errors.Error.Message, doc.RequestID = me.Code, me.Message, reqID
	body, mErr := xml.Marshal(doc)
	if mErr != nil {
		body = []byte("<Response><Errors><Error><Code>InternalError</Code></Error></Errors></Response>")
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(statusFor(me.Code))
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(body)
	h.metrics.observe(name, me.Code, time.Since(start).Seconds())
	klog.V(4).InfoS("EC2 request failed", "action", name, "requestID", reqID, "code", me.Code, "message", me.Message)
}

// statusFor is the HTTP status EC2 sends with an error code.
func statusFor(code string) int {
	switch code {
	case "InternalError":
		return http.StatusInternalServerError
	case "Unavailable", "RequestLimitExceeded":
		return http.StatusServiceUnavailable
	case model.CodeDryRunOperation:
		return http.StatusPreconditionFailed
	case "UnauthorizedOperation":
		return http.StatusForbidden
	default:
		return http.StatusBadRequest
	}
}

// newRequestID returns a UUID-shaped request ID, as EC2 sends.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// zoneID maps a zone name to its ID.
func (h *handler) zoneID(name string) string {
	for _, z := range h.cloud.Zones() {
		if z.Name == name {
			return z.ID
		}
	}
	return ""
}
