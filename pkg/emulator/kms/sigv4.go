package kms

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/iam"
)

// sigV4Algorithm is the only signing algorithm KMS takes (SigV4; SigV4a is
// for multi-region S3 access points).
const sigV4Algorithm = "AWS4-HMAC-SHA256"

// maxClockSkew is how far a request's X-Amz-Date may be from now, as AWS allows.
const maxClockSkew = 5 * time.Minute

// amzDateFormat is X-Amz-Date's format.
const amzDateFormat = "20060102T150405Z"

// authorization is a parsed SigV4 Authorization header.
type authorization struct {
	accessKeyID   string
	date          string // yyyymmdd of the credential scope
	region        string
	service       string
	signedHeaders []string
	signature     string
}

func parseAuthorization(h string) (authorization, bool) {
	var a authorization
	rest, ok := strings.CutPrefix(h, sigV4Algorithm+" ")
	if !ok {
		return a, false
	}
	for _, part := range strings.Split(rest, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return a, false
		}
		switch key {
		case "Credential":
			scope := strings.Split(value, "/")
			if len(scope) != 5 || scope[4] != "aws4_request" {
				return a, false
			}
			a.accessKeyID, a.date, a.region, a.service = scope[0], scope[1], scope[2], scope[3]
		case "SignedHeaders":
			a.signedHeaders = strings.Split(value, ";")
		case "Signature":
			a.signature = value
		}
	}
	return a, a.accessKeyID != "" && len(a.signedHeaders) > 0 && a.signature != ""
}

// authenticate verifies a request's SigV4 signature against the IAM store's
// credentials (temporary ones STS issued, or declared access keys) and
// returns who signed it. region and service are what the credential scope
// must name; body is the request's payload.
func authenticate(r *http.Request, body []byte, store *iam.Store, region, service string, now time.Time) (iam.Caller, *iam.Error) {
	header := r.Header.Get("Authorization")
	if header == "" {
		return iam.Caller{}, iam.Errorf("MissingAuthenticationTokenException", http.StatusBadRequest, "Missing Authentication Token")
	}
	a, ok := parseAuthorization(header)
	if !ok {
		return iam.Caller{}, iam.Errorf("IncompleteSignatureException", http.StatusBadRequest,
			"Authorization header requires Credential, SignedHeaders and Signature of %s", sigV4Algorithm)
	}
	amzDate := r.Header.Get("X-Amz-Date")
	signedAt, err := time.Parse(amzDateFormat, amzDate)
	switch {
	case err != nil:
		return iam.Caller{}, iam.Errorf("IncompleteSignatureException", http.StatusBadRequest, "X-Amz-Date %q is missing or malformed", amzDate)
	case !slices.Contains(a.signedHeaders, "host") || !slices.Contains(a.signedHeaders, "x-amz-date"):
		return iam.Caller{}, iam.Errorf("IncompleteSignatureException", http.StatusBadRequest, "the signed headers must include host and x-amz-date")
	case a.date != amzDate[:8]:
		return iam.Caller{}, iam.Errorf("InvalidSignatureException", http.StatusBadRequest, "the credential scope's date %s is not the request's %s", a.date, amzDate[:8])
	case signedAt.Before(now.Add(-maxClockSkew)) || signedAt.After(now.Add(maxClockSkew)):
		return iam.Caller{}, iam.Errorf("InvalidSignatureException", http.StatusBadRequest,
			"Signature expired: %s is now earlier than %s (%s - 5 min.)", amzDate, now.Add(-maxClockSkew).UTC().Format(amzDateFormat), now.UTC().Format(amzDateFormat))
	case a.service != service:
		return iam.Caller{}, iam.Errorf("InvalidSignatureException", http.StatusBadRequest, "Credential should be scoped to correct service: '%s'.", service)
	case a.region != region:
		return iam.Caller{}, iam.Errorf("InvalidSignatureException", http.StatusBadRequest, "Credential should be scoped to a valid region, not '%s'.", a.region)
	}
	cred, err := store.Credential(a.accessKeyID)
	switch {
	case errors.Is(err, iam.ErrCredentialsExpired):
		return iam.Caller{}, iam.Errorf("ExpiredTokenException", http.StatusBadRequest, "The security token included in the request is expired")
	case err != nil:
		return iam.Caller{}, iam.Errorf("UnrecognizedClientException", http.StatusBadRequest, "The security token included in the request is invalid.")
	}
	if cred.SessionToken != "" && (!slices.Contains(a.signedHeaders, "x-amz-security-token") ||
		!hmac.Equal([]byte(r.Header.Get("X-Amz-Security-Token")), []byte(cred.SessionToken))) {
		return iam.Caller{}, iam.Errorf("UnrecognizedClientException", http.StatusBadRequest, "The security token included in the request is invalid.")
	}
	want := signature(cred.Secret, a, amzDate, canonicalRequest(r, a.signedHeaders, body))
	if !hmac.Equal([]byte(want), []byte(a.signature)) {
		return iam.Caller{}, iam.Errorf("InvalidSignatureException", http.StatusBadRequest,
			"The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.")
	}
	return cred.Caller, nil
}

// canonicalRequest is SigV4's canonical form of a request.
func canonicalRequest(r *http.Request, signedHeaders []string, body []byte) string {
	var b strings.Builder
	b.WriteString(r.Method + "\n")
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	b.WriteString(escapePath(path) + "\n")
	b.WriteString(canonicalQuery(r.URL.Query()) + "\n")
	for _, name := range signedHeaders {
		value := strings.Join(r.Header.Values(name), ",")
		if name == "host" {
			value = r.Host
		}
		b.WriteString(name + ":" + strings.Join(strings.Fields(value), " ") + "\n")
	}
	b.WriteString("\n" + strings.Join(signedHeaders, ";") + "\n")
	sum := sha256.Sum256(body)
	b.WriteString(hex.EncodeToString(sum[:]))
	return b.String()
}

// escapePath URI-encodes a path as SigV4 does for every service but S3:
// the already escaped path is escaped once more, slashes kept.
func escapePath(p string) string {
	segments := strings.Split(p, "/")
	for i, s := range segments {
		segments[i] = uriEncode(s)
	}
	return strings.Join(segments, "/")
}

func canonicalQuery(q url.Values) string {
	var pairs []string
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, uriEncode(k)+"="+uriEncode(v))
		}
	}
	sort.Strings(pairs)
	return strings.Join(pairs, "&")
}

// uriEncode encodes everything but RFC 3986's unreserved characters.
func uriEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{c})))
	}
	return b.String()
}

// signature is the hex SigV4 signature of a canonical request.
func signature(secret string, a authorization, amzDate, canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	scope := strings.Join([]string{a.date, a.region, a.service, "aws4_request"}, "/")
	toSign := sigV4Algorithm + "\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	key := []byte("AWS4" + secret)
	for _, part := range []string{a.date, a.region, a.service, "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	return hex.EncodeToString(hmacSHA256(key, toSign))
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}
