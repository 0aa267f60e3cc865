package imds

import (
	"net/http"
	"testing"
	"time"
)

func TestTokenRequests(t *testing.T) {
	srv := newTestServer(t, testInstance(), Options{})
	tests := []struct {
		name       string
		method     string
		header     map[string]string
		wantStatus int
	}{
		{name: "valid", method: http.MethodPut, header: map[string]string{tokenTTLHeader: "21600"}, wantStatus: 200},
		{name: "minimum ttl", method: http.MethodPut, header: map[string]string{tokenTTLHeader: "1"}, wantStatus: 200},
		{name: "lower-case header", method: http.MethodPut, header: map[string]string{"x-aws-ec2-metadata-token-ttl-seconds": "60"}, wantStatus: 200},
		{name: "missing ttl", method: http.MethodPut, wantStatus: 400},
		{name: "zero ttl", method: http.MethodPut, header: map[string]string{tokenTTLHeader: "0"}, wantStatus: 400},
		{name: "ttl too long", method: http.MethodPut, header: map[string]string{tokenTTLHeader: "21601"}, wantStatus: 400},
		{name: "ttl not a number", method: http.MethodPut, header: map[string]string{tokenTTLHeader: "1h"}, wantStatus: 400},
		{name: "through a proxy", method: http.MethodPut, header: map[string]string{tokenTTLHeader: "60", "X-Forwarded-For": "10.0.0.9"}, wantStatus: 403},
		{name: "GET", method: http.MethodGet, header: map[string]string{tokenTTLHeader: "60"}, wantStatus: 405},
		{name: "POST", method: http.MethodPost, header: map[string]string{tokenTTLHeader: "60"}, wantStatus: 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body, hdr := do(t, tc.method, srv.URL+tokenPath, tc.header)
			if status != tc.wantStatus {
				t.Fatalf("%s %s = %d %q, want %d", tc.method, tokenPath, status, body, tc.wantStatus)
			}
			if status != 200 {
				return
			}
			if body == "" {
				t.Fatal("empty token")
			}
			wantTTL := tc.header[tokenTTLHeader]
			if wantTTL == "" {
				wantTTL = tc.header["x-aws-ec2-metadata-token-ttl-seconds"]
			}
			if got := hdr.Get(tokenTTLHeader); got != wantTTL {
				t.Fatalf("TTL header = %q, want %q", got, wantTTL)
			}
		})
	}
}

func TestMetadataMethods(t *testing.T) {
	srv := newTestServer(t, testInstance(), Options{})
	for _, method := range []string{http.MethodPut, http.MethodPost, http.MethodDelete} {
		t.Run(method, func(t *testing.T) {
			if status, _, _ := do(t, method, srv.URL+"/latest/meta-data/instance-id", nil); status != 405 {
				t.Fatalf("%s metadata = %d, want 405", method, status)
			}
		})
	}
}

// getToken fetches a session token with the given TTL in seconds.
func getToken(t *testing.T, url, ttl string) string {
	t.Helper()
	status, tok, _ := do(t, http.MethodPut, url+tokenPath, map[string]string{tokenTTLHeader: ttl})
	if status != 200 {
		t.Fatalf("token: %d %q", status, tok)
	}
	return tok
}

func TestTokenValidation(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	tests := []struct {
		name         string
		requireToken bool
		// token returns the header value to send, given a fresh 60-second
		// token from this server and one from another server.
		token      func(fresh, foreign string) string
		advance    time.Duration
		wantStatus int
	}{
		{name: "v1 allowed by default", token: func(string, string) string { return "" }, wantStatus: 200},
		{name: "v1 refused when tokens are required", requireToken: true, token: func(string, string) string { return "" }, wantStatus: 401},
		{name: "valid token", requireToken: true, token: func(f, _ string) string { return f }, wantStatus: 200},
		{name: "valid token, v1 allowed", token: func(f, _ string) string { return f }, wantStatus: 200},
		{name: "token just before expiry", requireToken: true, token: func(f, _ string) string { return f }, advance: 59 * time.Second, wantStatus: 200},
		{name: "expired token", requireToken: true, token: func(f, _ string) string { return f }, advance: 60 * time.Second, wantStatus: 401},
		{name: "expired token even when v1 is allowed", token: func(f, _ string) string { return f }, advance: time.Hour, wantStatus: 401},
		{name: "garbage token", token: func(string, string) string { return "not-a-token" }, wantStatus: 401},
		{name: "tampered token", token: func(f, _ string) string { return flipFirst(f) }, wantStatus: 401},
		{name: "token from another server", requireToken: true, token: func(_, other string) string { return other }, wantStatus: 401},
	}
	other := newTestServer(t, testInstance(), Options{Now: clock.Now})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &fakeClock{now: clock.Now()}
			srv := newTestServer(t, testInstance(), Options{RequireToken: tc.requireToken, Now: c.Now})
			tok := tc.token(getToken(t, srv.URL, "60"), getToken(t, other.URL, "60"))
			c.Advance(tc.advance)
			var hdr map[string]string
			if tok != "" {
				hdr = map[string]string{tokenHeader: tok}
			}
			status, body, _ := do(t, http.MethodGet, srv.URL+"/latest/meta-data/instance-id", hdr)
			if status != tc.wantStatus {
				t.Fatalf("GET instance-id = %d %q, want %d", status, body, tc.wantStatus)
			}
			if status == 200 && body != "i-0123456789abcdef0" {
				t.Fatalf("instance-id = %q", body)
			}
		})
	}
}

// flipFirst changes the token's first character, which changes the expiry
// it encodes, so the signature no longer matches.
func flipFirst(tok string) string {
	if tok[0] == 'A' {
		return "B" + tok[1:]
	}
	return "A" + tok[1:]
}
