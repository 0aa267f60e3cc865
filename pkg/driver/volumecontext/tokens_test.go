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
		name          string
		secrets, vc   map[string]string
		audience      string
		want          string
		wantInSecrets bool
		wantErr       string
	}{
		{name: "in the secrets", secrets: map[string]string{ServiceAccountTokensKey: tokens}, audience: "sts.amazonaws.com", want: "aaa.bbb.ccc", wantInSecrets: true},
		{name: "secrets first", secrets: map[string]string{ServiceAccountTokensKey: tokens}, vc: map[string]string{ServiceAccountTokensKey: other},
			audience: "sts.amazonaws.com", want: "aaa.bbb.ccc", wantInSecrets: true},
		{name: "in the volume context", vc: map[string]string{ServiceAccountTokensKey: other}, audience: "sts.amazonaws.com", want: "from.the.context"},
		{name: "another audience", secrets: map[string]string{ServiceAccountTokensKey: tokens}, audience: "vault", want: "vvv.www.xxx", wantInSecrets: true},
		{name: "none", secrets: map[string]string{"luksPassphrase": "x"}, audience: "sts.amazonaws.com", wantErr: "no service-account tokens"},
		{name: "not for this audience", vc: map[string]string{ServiceAccountTokensKey: tokens}, audience: "kms",
			wantErr: `audiences ["sts.amazonaws.com", "vault"] but none for "kms": add {audience: kms}`},
		{name: "not JSON", vc: map[string]string{ServiceAccountTokensKey: "secret.jwt.value"}, audience: "kms", wantErr: "not the kubelet's JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ServiceAccountTokenFor(tc.secrets, tc.vc, tc.audience)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				for _, secret := range []string{"aaa.bbb.ccc", "vvv.www.xxx", "secret.jwt.value"} {
					if strings.Contains(err.Error(), secret) {
						t.Fatal("the error holds a token")
					}
				}
				return
			}
			if err != nil || got.Token != tc.want || got.InSecrets != tc.wantInSecrets || !got.Expiration.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
	if _, err := ServiceAccountTokenFor(nil, nil, "x"); !errors.Is(err, ErrNoServiceAccountTokens) {
		t.Fatalf("no maps: %v", err)
	}
}
