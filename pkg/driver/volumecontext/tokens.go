package volumecontext

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ServiceAccountToken is one of the pod's service-account tokens the
// kubelet passed to NodePublishVolume. Token is a credential: it goes to
// STS and nowhere else, never into a log, an error or a file.
type ServiceAccountToken struct {
	Token string
	// Expiration is when the token stops being valid (the zero time when
	// the kubelet did not say).
	Expiration time.Time
	// Place is where it came from.
	Place TokenPlace
}

// TokenPlace is where the kubelet puts a pod's service-account tokens in
// NodePublishVolume, as its driver's CSIDriver object tells it. Only that
// place holds tokens the kubelet vouches for: the other one is filled from
// objects that others may write (a PersistentVolume's volumeAttributes, a
// node-publish Secret a user owns), so a token found there is not the pod's.
type TokenPlace int

const (
	// TokensInVolumeContext: the CSIDriver leaves serviceAccountTokenInSecrets
	// off (the default, and all Kubernetes before 1.35).
	TokensInVolumeContext TokenPlace = iota
	// TokensInSecrets: the CSIDriver sets serviceAccountTokenInSecrets.
	TokensInSecrets
)

// String names the place as the request's field, for logs and errors.
func (p TokenPlace) String() string {
	if p == TokensInSecrets {
		return "secrets"
	}
	return "volume context"
}

// Other is the field of the request that is not p.
func (p TokenPlace) Other() TokenPlace {
	if p == TokensInSecrets {
		return TokensInVolumeContext
	}
	return TokensInSecrets
}

// field is p's field of a request.
func (p TokenPlace) field(secrets, volumeContext map[string]string) map[string]string {
	if p == TokensInSecrets {
		return secrets
	}
	return volumeContext
}

// ErrNoServiceAccountTokens means the request carries no tokens where the
// kubelet puts them: the CSIDriver object asks for none (tokenRequests), or
// the volume is a raw block volume, to which the kubelet never gives them.
var ErrNoServiceAccountTokens = errors.New("the request carries no service-account tokens")

// ServiceAccountTokenFor returns the pod's token for audience from place,
// where the kubelet puts the tokens, and never from the other field of the
// request. The errors say what the kubelet sent, never the tokens.
func ServiceAccountTokenFor(secrets, volumeContext map[string]string, audience string, place TokenPlace) (ServiceAccountToken, error) {
	raw, ok := place.field(secrets, volumeContext)[ServiceAccountTokensKey]
	if !ok {
		return ServiceAccountToken{}, ErrNoServiceAccountTokens
	}
	var tokens map[string]struct {
		Token               string    `json:"token"`
		ExpirationTimestamp time.Time `json:"expirationTimestamp"`
	}
	if err := json.Unmarshal([]byte(raw), &tokens); err != nil {
		// The decoder's message could quote the value; say only where.
		return ServiceAccountToken{}, fmt.Errorf("%s is not the kubelet's JSON map of audiences to tokens", ServiceAccountTokensKey)
	}
	t, ok := tokens[audience]
	if !ok || t.Token == "" {
		audiences := make([]string, 0, len(tokens))
		for a := range tokens {
			audiences = append(audiences, fmt.Sprintf("%q", a))
		}
		slices.Sort(audiences)
		return ServiceAccountToken{}, fmt.Errorf("the kubelet passed tokens for the audiences [%s] but none for %q: add {audience: %s} to the CSIDriver's tokenRequests",
			strings.Join(audiences, ", "), audience, audience)
	}
	return ServiceAccountToken{Token: t.Token, Expiration: t.ExpirationTimestamp, Place: place}, nil
}

// TokensElsewhere reports whether the field of the request the kubelet does
// not put tokens in holds some anyway: someone put them there, and they are
// ignored.
func TokensElsewhere(secrets, volumeContext map[string]string, place TokenPlace) bool {
	_, ok := place.Other().field(secrets, volumeContext)[ServiceAccountTokensKey]
	return ok
}
