package imds

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// The IMDS protocol's paths and headers, and the token lifetime bounds EC2
// enforces.
const (
	tokenPath      = "/latest/api/token"
	latestPrefix   = "/latest/"
	tokenHeader    = "X-Aws-Ec2-Metadata-Token"
	tokenTTLHeader = "X-Aws-Ec2-Metadata-Token-Ttl-Seconds"
	minTokenTTL    = 1
	maxTokenTTL    = 21600
)

// Options tune the metadata service the way an instance's metadata options
// do on EC2.
type Options struct {
	// RequireToken answers 401 to every metadata request without a valid
	// session token, like an instance launched with HttpTokens=required.
	// The default accepts both IMDSv1 and IMDSv2 requests, like EC2's
	// HttpTokens=optional.
	RequireToken bool
	// Now is the clock that issues and expires tokens; nil means time.Now.
	// Tests set it to expire a token without waiting.
	Now func() time.Time
}

// handler serves the metadata of the instance that asks.
type handler struct {
	source func(caller string) Instance
	opts   Options
	// key signs session tokens. Tokens carry their own expiry and signature,
	// so the handler keeps no per-token state and any number of clients cost
	// nothing; a new handler (an emulator restart) invalidates old tokens, as
	// EC2 does when an instance stops.
	key [32]byte
}

// NewHandler returns an http.Handler that serves the metadata of the
// instance source returns for the caller's IP address (as EC2's IMDS answers
// each instance about itself). source is called on every request so the
// model's current state shows.
func NewHandler(source func(caller string) Instance, opts Options) http.Handler {
	h := &handler{source: source, opts: opts}
	if h.opts.Now == nil {
		h.opts.Now = time.Now
	}
	// crypto/rand.Read never fails (it panics on an unusable system source).
	_, _ = rand.Read(h.key[:])
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	w = rec
	w.Header().Set("Server", "EC2ws")
	if r.URL.Path == tokenPath {
		h.serveToken(w, r)
	} else {
		h.serveMetadata(w, r)
	}
	// The token header is never logged: it is a credential.
	klog.V(4).InfoS("IMDS request", "method", r.Method, "path", r.URL.Path,
		"withToken", r.Header.Get(tokenHeader) != "", "status", rec.status)
}

// serveToken issues an IMDSv2 session token.
func (h *handler) serveToken(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", http.MethodPut)
		writeError(w, http.StatusMethodNotAllowed)
		return
	}
	// EC2 refuses token requests that went through a proxy, so a
	// server-side request forgery cannot obtain a token.
	if r.Header.Get("X-Forwarded-For") != "" {
		writeError(w, http.StatusForbidden)
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get(tokenTTLHeader))
	if err != nil || ttl < minTokenTTL || ttl > maxTokenTTL {
		writeError(w, http.StatusBadRequest)
		return
	}
	expires := h.opts.Now().Add(time.Duration(ttl) * time.Second)
	w.Header().Set(tokenTTLHeader, strconv.Itoa(ttl))
	writeText(w, h.issueToken(expires))
}

// serveMetadata serves GETs below /latest/ and the version listing at /.
func (h *handler) serveMetadata(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed)
		return
	}
	if tok := r.Header.Get(tokenHeader); tok != "" {
		if !h.validToken(tok) {
			writeError(w, http.StatusUnauthorized)
			return
		}
	} else if h.opts.RequireToken {
		writeError(w, http.StatusUnauthorized)
		return
	}

	path := r.URL.Path
	if path == "/" {
		writeText(w, "latest")
		return
	}
	if path != "/latest" && !strings.HasPrefix(path, latestPrefix) {
		writeError(w, http.StatusNotFound)
		return
	}
	caller, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		caller = r.RemoteAddr
	}
	tree, err := h.source(caller).tree()
	if err != nil {
		klog.ErrorS(err, "Cannot render instance metadata")
		writeError(w, http.StatusInternalServerError)
		return
	}
	n, ok := tree.lookup(strings.TrimPrefix(path, "/latest"))
	if !ok {
		writeError(w, http.StatusNotFound)
		return
	}
	if n.isDir() {
		writeText(w, n.listing())
		return
	}
	writeText(w, n.value)
}

// tokenMACSize is how many bytes of the HMAC a token carries.
const tokenMACSize = sha256.Size

// issueToken makes an opaque token: its expiry (Unix nanoseconds) and an
// HMAC of it, base64-encoded like EC2's tokens.
func (h *handler) issueToken(expires time.Time) string {
	buf := make([]byte, 8, 8+tokenMACSize)
	binary.BigEndian.PutUint64(buf, uint64(expires.UnixNano()))
	return base64.StdEncoding.EncodeToString(h.sign(buf))
}

// validToken reports whether tok was issued by this handler and has not
// expired.
func (h *handler) validToken(tok string) bool {
	raw, err := base64.StdEncoding.DecodeString(tok)
	if err != nil || len(raw) != 8+tokenMACSize {
		return false
	}
	if !hmac.Equal(h.sign(raw[:8]), raw) {
		return false
	}
	expires := time.Unix(0, int64(binary.BigEndian.Uint64(raw[:8])))
	return h.opts.Now().Before(expires)
}

// sign appends the HMAC of payload to it.
func (h *handler) sign(payload []byte) []byte {
	m := hmac.New(sha256.New, h.key[:])
	m.Write(payload)
	return m.Sum(payload[:len(payload):len(payload)])
}

// writeText answers 200 with a plain-text body, as IMDS does for every
// entry, the identity document included.
func writeText(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = fmt.Fprint(w, body)
}

// writeError answers with the small XHTML error page IMDS sends with every
// error status.
func writeError(w http.ResponseWriter, status int) {
	title := fmt.Sprintf("%d - %s", status, http.StatusText(status))
	body := `<?xml version="1.0" encoding="iso-8859-1"?>` + "\n" +
		`<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">` + "\n" +
		`<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">` + "\n" +
		"<head><title>" + title + "</title></head>\n" +
		"<body><h1>" + title + "</h1></body>\n" +
		"</html>\n"
	w.Header().Set("Content-Type", "text/html")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = fmt.Fprint(w, body)
}

// statusRecorder remembers the status written, for the request log.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}
