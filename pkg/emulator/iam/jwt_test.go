package iam

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// TestES256 checks tokens signed with an elliptic-curve key, which a
// Kubernetes API server uses when its service-account key is one.
func TestES256(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := key.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding
	set := JWKS{Keys: []JWK{{Kty: "EC", Crv: "P-256", Kid: "ec", X: b64.EncodeToString(raw[1:33]), Y: b64.EncodeToString(raw[33:])}}}
	if err := set.check(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sign := func(alg string, claims Claims) string {
		header, _ := json.Marshal(map[string]string{"alg": alg, "kid": "ec"})
		payload, _ := json.Marshal(claims)
		signed := b64.EncodeToString(header) + "." + b64.EncodeToString(payload)
		digest := sha256.Sum256([]byte(signed))
		r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
		if err != nil {
			t.Fatal(err)
		}
		sig := make([]byte, 64)
		r.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
		return signed + "." + b64.EncodeToString(sig)
	}
	valid := Claims{Issuer: "https://i", Subject: "s", Audience: Audience{"a"}, Expiry: now.Add(time.Hour).Unix()}
	tests := []struct {
		name  string
		token string
		want  error
	}{
		{name: "valid", token: sign("ES256", valid)},
		{name: "alg confusion", token: sign("RS256", valid), want: errTokenSignature},
		{name: "none", token: sign("none", valid), want: errTokenSignature},
		{name: "no exp", token: sign("ES256", Claims{Issuer: "https://i"}), want: errTokenMalformed},
		{name: "not yet", token: sign("ES256", Claims{Issuer: "https://i", Expiry: now.Add(2 * time.Hour).Unix(), NotBefore: now.Add(time.Hour).Unix()}), want: errTokenSignature},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := parseJWT(tc.token)
			if err != nil {
				t.Fatal(err)
			}
			err = p.verify(set, now)
			if (tc.want == nil && err != nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("verify = %v, want %v", err, tc.want)
			}
		})
	}
	tampered := sign("ES256", valid)
	tampered = tampered[:len(tampered)-4] + "AAAA"
	p, err := parseJWT(tampered)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.verify(set, now); !errors.Is(err, errTokenSignature) {
		t.Fatalf("a tampered signature: %v", err)
	}
}
