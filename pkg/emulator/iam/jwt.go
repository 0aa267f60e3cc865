package iam

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"
)

// JWKS is a JSON Web Key Set: the public keys an OIDC issuer signs its
// tokens with (a Kubernetes API server serves its own at /openid/v1/jwks).
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// JWK is one public key of a set: RSA (n, e) or elliptic-curve (crv, x, y).
type JWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid,omitempty"`
	Alg string `json:"alg,omitempty"`
	Use string `json:"use,omitempty"`
	N   string `json:"n,omitempty"`
	E   string `json:"e,omitempty"`
	Crv string `json:"crv,omitempty"`
	X   string `json:"x,omitempty"`
	Y   string `json:"y,omitempty"`
}

// publicKey decodes the key.
func (k JWK) publicKey() (crypto.PublicKey, error) {
	b64 := base64.RawURLEncoding
	switch k.Kty {
	case "RSA":
		n, errN := b64.DecodeString(k.N)
		e, errE := b64.DecodeString(k.E)
		if errN != nil || errE != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
			return nil, fmt.Errorf("RSA key %q: bad n or e", k.Kid)
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
	case "EC":
		var curve elliptic.Curve
		switch k.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return nil, fmt.Errorf("EC key %q: curve %q is not supported", k.Kid, k.Crv)
		}
		x, errX := b64.DecodeString(k.X)
		y, errY := b64.DecodeString(k.Y)
		size := (curve.Params().BitSize + 7) / 8
		if errX != nil || errY != nil || len(x) != size || len(y) != size {
			return nil, fmt.Errorf("EC key %q: bad x or y", k.Kid)
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, x...), y...))
		if err != nil {
			return nil, fmt.Errorf("EC key %q: %w", k.Kid, err)
		}
		return pub, nil
	default:
		return nil, fmt.Errorf("key %q: key type %q is not supported (RSA and EC are)", k.Kid, k.Kty)
	}
}

// check decodes every key of the set, so a bad set is refused when it is
// declared rather than when a token arrives.
func (s JWKS) check() error {
	if len(s.Keys) == 0 {
		return errors.New("the key set has no keys")
	}
	for _, k := range s.Keys {
		if _, err := k.publicKey(); err != nil {
			return err
		}
	}
	return nil
}

// Claims are the registered claims of a token that STS checks.
type Claims struct {
	Issuer    string   `json:"iss"`
	Subject   string   `json:"sub"`
	Audience  Audience `json:"aud"`
	Expiry    int64    `json:"exp"`
	NotBefore int64    `json:"nbf,omitempty"`
	IssuedAt  int64    `json:"iat,omitempty"`
}

// Audience is the aud claim: one string or a list.
type Audience []string

// UnmarshalJSON reads a string or a list of strings.
func (a *Audience) UnmarshalJSON(b []byte) error {
	var l StringList
	if err := l.UnmarshalJSON(b); err != nil {
		return fmt.Errorf("aud: %w", err)
	}
	*a = Audience(l)
	return nil
}

// Reasons a token is refused; STS answers each with its own error code.
var (
	// errTokenMalformed: not a signed JWT, or its claims cannot be read.
	errTokenMalformed = errors.New("the token is not a well-formed signed JWT")
	// errTokenSignature: no key of the issuer's set verifies the signature.
	errTokenSignature = errors.New("the token's signature does not verify with the issuer's keys")
	// errTokenExpired: the token's exp is past.
	errTokenExpired = errors.New("the token has expired")
)

// jwtParts splits a compact JWS and decodes its header and claims, without
// checking anything.
type jwtParts struct {
	header struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	claims    Claims
	signed    string
	signature []byte
}

func parseJWT(token string) (*jwtParts, error) {
	segments := strings.Split(token, ".")
	if len(segments) != 3 {
		return nil, errTokenMalformed
	}
	var p jwtParts
	b64 := base64.RawURLEncoding
	header, err := b64.DecodeString(segments[0])
	if err != nil || json.Unmarshal(header, &p.header) != nil {
		return nil, errTokenMalformed
	}
	payload, err := b64.DecodeString(segments[1])
	if err != nil || json.Unmarshal(payload, &p.claims) != nil {
		return nil, errTokenMalformed
	}
	if p.signature, err = b64.DecodeString(segments[2]); err != nil {
		return nil, errTokenMalformed
	}
	p.signed = segments[0] + "." + segments[1]
	return &p, nil
}

// verify checks the signature against the keys of the set (the one the
// header's kid names, else each) and the token's validity period.
func (p *jwtParts) verify(keys JWKS, now time.Time) error {
	hash, ok := map[string]crypto.Hash{
		"RS256": crypto.SHA256, "RS384": crypto.SHA384, "RS512": crypto.SHA512,
		"ES256": crypto.SHA256, "ES384": crypto.SHA384, "ES512": crypto.SHA512,
	}[p.header.Alg]
	if !ok {
		return fmt.Errorf("%w: algorithm %q is not accepted", errTokenSignature, p.header.Alg)
	}
	digest := digestOf(hash, p.signed)
	candidates := slices.DeleteFunc(slices.Clone(keys.Keys), func(k JWK) bool {
		return p.header.Kid != "" && k.Kid != "" && k.Kid != p.header.Kid
	})
	verified := false
	for _, k := range candidates {
		pub, err := k.publicKey()
		if err != nil {
			continue
		}
		if verifySignature(pub, p.header.Alg, hash, digest, p.signature) {
			verified = true
			break
		}
	}
	if !verified {
		return errTokenSignature
	}
	switch at := now.Unix(); {
	case p.claims.Expiry == 0:
		return fmt.Errorf("%w: the token has no exp claim", errTokenMalformed)
	case at >= p.claims.Expiry:
		return fmt.Errorf("%w: current date/time %s must be before the expiration date/time %s", errTokenExpired,
			now.UTC().Format(time.RFC3339), time.Unix(p.claims.Expiry, 0).UTC().Format(time.RFC3339))
	case p.claims.NotBefore != 0 && at < p.claims.NotBefore:
		return fmt.Errorf("%w: the token is not valid before %s", errTokenSignature, time.Unix(p.claims.NotBefore, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

func digestOf(h crypto.Hash, s string) []byte {
	switch h {
	case crypto.SHA384:
		d := sha512.Sum384([]byte(s))
		return d[:]
	case crypto.SHA512:
		d := sha512.Sum512([]byte(s))
		return d[:]
	default:
		d := sha256.Sum256([]byte(s))
		return d[:]
	}
}

// verifySignature checks a JWS signature: PKCS #1 v1.5 for RS*, the raw
// r‖s form of JWS for ES*.
func verifySignature(pub crypto.PublicKey, alg string, h crypto.Hash, digest, sig []byte) bool {
	switch key := pub.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") && rsa.VerifyPKCS1v15(key, h, digest, sig) == nil
	case *ecdsa.PublicKey:
		size := (key.Curve.Params().BitSize + 7) / 8
		if !strings.HasPrefix(alg, "ES") || len(sig) != 2*size {
			return false
		}
		r, s := new(big.Int).SetBytes(sig[:size]), new(big.Int).SetBytes(sig[size:])
		return ecdsa.Verify(key, digest, r, s)
	}
	return false
}
