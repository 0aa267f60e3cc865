package volumecontext

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestServiceAccountTokenFor(t *testing.T) {
	const tokens = `{"sts.amazonaws.com":{"token":"aaa.bbb.ccc","expirationTimestamp":"2030-01-02T03:04:05Z"},"vault":{"token":"vvv.www.xxx","expirationTimestamp":"2030-01-02T03:04:05Z"}}`
	other := `{"sts.amazonaws.com":{"token":"from.the.context","expirationTimestamp":"2030-01-02T03:04:05Z"}}`
	tests := []struct {
		name        string
		secrets, vc map[string]string
		audience    string
		place       TokenPlace
		want        string
		wantErr     string
	}{
		{name: "in the secrets", secrets: map[string]string{ServiceAccountTokensKey: tokens}, audience: "sts.amazonaws.com",
			place: TokensInSecrets, want: "aaa.bbb.ccc"},
		{name: "in the secrets, the volume context's ignored", secrets: map[string]string{ServiceAccountTokensKey: tokens},
			vc: map[string]string{ServiceAccountTokensKey: other}, audience: "sts.amazonaws.com", place: TokensInSecrets, want: "aaa.bbb.ccc"},
		{name: "in the volume context", vc: map[string]string{ServiceAccountTokensKey: other}, audience: "sts.amazonaws.com", want: "from.the.context"},
		{name: "in the volume context, the secrets' ignored", secrets: map[string]string{ServiceAccountTokensKey: tokens},
			vc: map[string]string{ServiceAccountTokensKey: other}, audience: "sts.amazonaws.com", want: "from.the.context"},
		{name: "only in the secrets, where the kubelet does not put them", secrets: map[string]string{ServiceAccountTokensKey: tokens},
			audience: "sts.amazonaws.com", wantErr: "no service-account tokens"},
		{name: "only in the volume context, where the kubelet does not put them", vc: map[string]string{ServiceAccountTokensKey: other},
			audience: "sts.amazonaws.com", place: TokensInSecrets, wantErr: "no service-account tokens"},
		{name: "another audience", secrets: map[string]string{ServiceAccountTokensKey: tokens}, audience: "vault", place: TokensInSecrets, want: "vvv.www.xxx"},
		{name: "none", secrets: map[string]string{"luksPassphrase": "x"}, audience: "sts.amazonaws.com", place: TokensInSecrets, wantErr: "no service-account tokens"},
		{name: "not for this audience", vc: map[string]string{ServiceAccountTokensKey: tokens}, audience: "kms",
			wantErr: `audiences ["sts.amazonaws.com", "vault"] but none for "kms": add {audience: kms}`},
		{name: "not JSON", vc: map[string]string{ServiceAccountTokensKey: "secret.jwt.value"}, audience: "kms", wantErr: "not the kubelet's JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ServiceAccountTokenFor(tc.secrets, tc.vc, tc.audience, tc.place)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				for _, secret := range []string{"aaa.bbb.ccc", "vvv.www.xxx", "secret.jwt.value", "from.the.context"} {
					if strings.Contains(err.Error(), secret) {
						t.Fatal("the error holds a token")
					}
				}
				return
			}
			if err != nil || got.Token != tc.want || got.Place != tc.place || !got.Expiration.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
	if _, err := ServiceAccountTokenFor(nil, nil, "x", TokensInSecrets); !errors.Is(err, ErrNoServiceAccountTokens) {
		t.Fatalf("no maps: %v", err)
	}
}

func TestTokensElsewhere(t *testing.T) {
	tokens := map[string]string{ServiceAccountTokensKey: "{}"}
	tests := []struct {
		name        string
		secrets, vc map[string]string
		place       TokenPlace
		want        bool
	}{
		{name: "where the kubelet puts them", vc: tokens},
		{name: "where the kubelet puts them, in the secrets", secrets: tokens, place: TokensInSecrets},
		{name: "planted in the secrets", secrets: tokens, vc: tokens, want: true},
		{name: "planted in the volume context", secrets: tokens, vc: tokens, place: TokensInSecrets, want: true},
		{name: "nowhere", secrets: map[string]string{"luksPassphrase": "x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := TokensElsewhere(tc.secrets, tc.vc, tc.place); got != tc.want {
				t.Fatalf("TokensElsewhere = %t, want %t", got, tc.want)
			}
		})
	}
}
