// Package iamtest signs web identity tokens the way a Kubernetes API server
// signs service-account tokens, for tests that need STS to accept (or
// refuse) a token without a cluster: the emulator's STS and KMS tests, the
// node service's workload-identity tests.
package iamtest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/iam"
)

// Issuer is an OIDC issuer with one RSA signing key.
type Issuer struct {
	// URL is the issuer (the tokens' iss claim).
	URL string
	key *rsa.PrivateKey
	kid string
}

// NewIssuer makes an issuer with a fresh 2048-bit key.
func NewIssuer(t testing.TB, url string) *Issuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &Issuer{URL: url, key: key, kid: "test-key-" + randomID()}
}

// JWKS is the issuer's public key set.
func (i *Issuer) JWKS() iam.JWKS {
	return iam.JWKS{Keys: []iam.JWK{{
		Kty: "RSA", Kid: i.kid, Alg: "RS256", Use: "sig",
		N: base64.RawURLEncoding.EncodeToString(i.key.N.Bytes()),
		E: base64.RawURLEncoding.EncodeToString(big.NewInt(int64(i.key.E)).Bytes()),
	}}}
}

// Provider is an IAM OIDC provider for the issuer accepting audiences
// (none: sts.amazonaws.com).
func (i *Issuer) Provider(audiences ...string) iam.OIDCProvider {
	return iam.OIDCProvider{URL: i.URL, ClientIDs: audiences, JWKS: i.JWKS()}
}

// ServiceAccountSubject is the sub claim of a Kubernetes service account's tokens.
func ServiceAccountSubject(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Token signs a token for subject and audience that expires after ttl (a
// negative ttl makes one that has expired already). Pod, when not empty,
// is bound into the kubernetes.io claim as a kubelet-requested token's is.
func (i *Issuer) Token(t testing.TB, subject, audience string, ttl time.Duration, pod ...string) string {
	t.Helper()
	now := time.Now()
	claims := map[string]any{
		"iss": i.URL, "sub": subject, "aud": []string{audience},
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(ttl).Unix(),
		"jti": randomID(),
	}
	if len(pod) == 2 {
		claims["kubernetes.io"] = map[string]any{
			"namespace": pod[0],
			"pod":       map[string]string{"name": pod[1], "uid": randomID()},
		}
	}
	return i.sign(t, claims)
}

func (i *Issuer) sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": i.kid, "typ": "JWT"})
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding
	signed := b64.EncodeToString(header) + "." + b64.EncodeToString(payload)
	digest := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, i.key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + b64.EncodeToString(sig)
}

// TrustPolicy is a role trust policy as IRSA writes one: the issuer's
// provider may assume the role for the given service-account subjects (sub
// patterns, with * allowed) and the audience sts.amazonaws.com.
func (i *Issuer) TrustPolicy(account string, subjects ...string) *iam.Policy {
	host := i.URL[len("https://"):]
	subs := iam.StringList(subjects)
	return &iam.Policy{Version: "2012-10-17", Statement: []iam.Statement{{
		Effect:    iam.EffectAllow,
		Principal: &iam.Principal{Federated: iam.StringList{iam.ProviderARN(account, i.URL)}},
		Action:    iam.StringList{"sts:AssumeRoleWithWebIdentity"},
		Condition: map[string]map[string]iam.StringList{
			"StringEquals": {host + ":aud": {iam.DefaultAudience}},
			"StringLike":   {host + ":sub": subs},
		},
	}}}
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Policy parses a policy document a test declares, failing the test when
// the emulator would refuse it.
func Policy(t testing.TB, doc string) *iam.Policy {
	t.Helper()
	p, err := iam.ParsePolicy([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
