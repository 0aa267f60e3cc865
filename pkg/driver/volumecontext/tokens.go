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
	// InSecrets says where it came from: the request's secrets
	// (serviceAccountTokenInSecrets) rather than its volume context.
	InSecrets bool
}

// ErrNoServiceAccountTokens means the request carries no tokens at all: the
// CSIDriver object asks for none (tokenRequests), or the volume is a raw
// block volume, to which the kubelet never gives them.
var ErrNoServiceAccountTokens = errors.New("the request carries no service-account tokens")

// ServiceAccountTokenFor returns the pod's token for audience, from the
// request's secrets first (where the kubelet puts it when the CSIDriver
// sets serviceAccountTokenInSecrets) and its volume context second (where
// it puts it otherwise). The errors say what the kubelet sent, never the
// tokens.
func ServiceAccountTokenFor(secrets, volumeContext map[string]string, audience string) (ServiceAccountToken, error) {
	raw, inSecrets := secrets[ServiceAccountTokensKey]
	if !inSecrets {
		var ok bool
		if raw, ok = volumeContext[ServiceAccountTokensKey]; !ok {
			return ServiceAccountToken{}, ErrNoServiceAccountTokens
		}
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
	return ServiceAccountToken{Token: t.Token, Expiration: t.ExpirationTimestamp, InSecrets: inSecrets}, nil
}
