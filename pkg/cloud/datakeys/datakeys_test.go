package datakeys

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/iam/iamtest"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
)

const (
	account  = "123456789012"
	appRole  = "arn:aws:iam::123456789012:role/app"
	ctrlRole = "arn:aws:iam::123456789012:role/controller"
)

type fixture struct {
	env       *emulatortest.Env
	issuer    *iamtest.Issuer
	wrapper   Wrapper
	unwrapper Unwrapper
}

func start(t *testing.T) *fixture {
	t.Helper()
	issuer := iamtest.NewIssuer(t, "https://kubernetes.default.svc.cluster.local")
	policy, err := iam.ParsePolicy([]byte(`{"Statement":[
		{"Effect":"Allow","Principal":{"AWS":"` + ctrlRole + `"},"Action":["kms:GenerateDataKeyWithoutPlaintext","kms:ReEncrypt*"],"Resource":"*"},
		{"Effect":"Allow","Principal":{"AWS":"` + appRole + `"},"Action":"kms:Decrypt","Resource":"*"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	env := emulatortest.Start(t, emulatortest.Options{
		IAM: iam.Config{
			OIDCProviders: []iam.OIDCProvider{issuer.Provider()},
			Roles: []iam.Role{
				{Name: "app", TrustPolicy: issuer.TrustPolicy(account, iamtest.ServiceAccountSubject("shop", "app"))},
				{Name: "other", TrustPolicy: issuer.TrustPolicy(account, iamtest.ServiceAccountSubject("shop", "other"))},
			},
			AccessKeys: []iam.AccessKey{{ID: "ctrl", Secret: "ctrl-secret", Principal: ctrlRole}},
		},
		KMS: kms.Config{Keys: []kms.KeySpec{{ID: "volumes", Aliases: []string{"alias/volumes"}, Policy: policy}}},
	})
	// A node's configuration may carry credentials (an instance profile);
	// the unwrapper must never use them.
	return &fixture{env: env, issuer: issuer, wrapper: NewWrapper(env.AWSConfig("ctrl", "ctrl-secret")),
		unwrapper: NewUnwrapper(env.AWSConfig("ctrl", "ctrl-secret"))}
}

func (f *fixture) request(t *testing.T, serviceAccount string, w Wrapped, b Binding) UnwrapRequest {
	return UnwrapRequest{
		Token:   f.issuer.Token(t, iamtest.ServiceAccountSubject("shop", serviceAccount), "sts.amazonaws.com", time.Hour),
		RoleARN: appRole, SessionName: "shop." + serviceAccount, KeyID: w.KeyARN, Ciphertext: w.Ciphertext, Binding: b,
	}
}

func TestWrapRewrapUnwrap(t *testing.T) {
	f := start(t)
	ctx := t.Context()
	w, err := f.wrapper.Generate(ctx, "alias/volumes", Binding{VolumeID: "vol-1"})
	if err != nil {
		t.Fatal(err)
	}
	if w.KeyARN != "arn:aws:kms:us-east-1:123456789012:key/volumes" || len(w.Ciphertext) == 0 {
		t.Fatalf("Generate = %+v", w)
	}
	key, err := f.unwrapper.Unwrap(ctx, f.request(t, "app", w, Binding{VolumeID: "vol-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != 32 {
		t.Fatalf("a key of %d bytes", len(key))
	}
	clone, err := f.wrapper.Rewrap(ctx, w, Binding{VolumeID: "vol-1"}, "alias/volumes", Binding{VolumeID: "vol-2"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.unwrapper.Unwrap(ctx, f.request(t, "app", clone, Binding{VolumeID: "vol-2"}))
	if err != nil || !bytes.Equal(again, key) {
		t.Fatalf("the clone's key differs: %v", err)
	}
	if n := f.env.ServiceCalls("sts", "AssumeRoleWithWebIdentity", "Success"); n != 2 {
		t.Fatalf("%d AssumeRoleWithWebIdentity", n)
	}
	if n := f.env.ServiceCalls("kms", "Decrypt", "Success"); n != 2 {
		t.Fatalf("%d Decrypt", n)
	}
}

func TestRefusals(t *testing.T) {
	f := start(t)
	ctx := t.Context()
	w, err := f.wrapper.Generate(ctx, "volumes", Binding{VolumeID: "vol-1"})
	if err != nil {
		t.Fatal(err)
	}
	otherRole := f.request(t, "other", w, Binding{VolumeID: "vol-1"})
	otherRole.RoleARN = "arn:aws:iam::123456789012:role/other"
	expired := f.request(t, "app", w, Binding{VolumeID: "vol-1"})
	expired.Token = f.issuer.Token(t, iamtest.ServiceAccountSubject("shop", "app"), "sts.amazonaws.com", -time.Minute)
	noKeyRegion := f.request(t, "app", w, Binding{VolumeID: "vol-1"})
	noKeyRegion.KeyID = "volumes"
	tests := []struct {
		name string
		req  UnwrapRequest
		want error
	}{
		{name: "a service account the role does not trust", req: f.request(t, "other", w, Binding{VolumeID: "vol-1"}), want: ErrTokenRefused},
		{name: "an expired token", req: expired, want: ErrTokenRefused},
		{name: "a role the key policy does not name", req: otherRole, want: ErrAccessDenied},
		{name: "another volume's context", req: f.request(t, "app", w, Binding{VolumeID: "vol-2"}), want: ErrWrongVolume},
		{name: "a key ID without its ARN uses the node's region", req: noKeyRegion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, err := f.unwrapper.Unwrap(ctx, tc.req)
			if tc.want == nil {
				if err != nil || len(key) != 32 {
					t.Fatalf("Unwrap = %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || key != nil {
				t.Fatalf("Unwrap = %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), tc.req.Token) {
				t.Fatal("the error holds the token")
			}
		})
	}
	if _, err := f.wrapper.Generate(ctx, "alias/missing", Binding{VolumeID: "vol-3"}); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("Generate with a missing key = %v", err)
	}
	disabled := false
	if _, err := f.env.Keys().Declare(kms.KeySpec{ID: "volumes", Aliases: []string{"alias/volumes"}, Enabled: &disabled,
		Policy: mustPolicy(t, f)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.unwrapper.Unwrap(ctx, f.request(t, "app", w, Binding{VolumeID: "vol-1"})); !errors.Is(err, ErrKeyDisabled) {
		t.Fatalf("with the key disabled: %v", err)
	}
	if _, err := f.wrapper.Rewrap(ctx, w, Binding{VolumeID: "vol-1"}, "volumes", Binding{VolumeID: "vol-2"}); !errors.Is(err, ErrKeyDisabled) {
		t.Fatalf("Rewrap with the key disabled: %v", err)
	}
}

func mustPolicy(t *testing.T, f *fixture) *iam.Policy {
	t.Helper()
	for _, k := range f.env.Keys().Keys() {
		if k.ID == "volumes" {
			return k.Policy
		}
	}
	t.Fatal("no key volumes")
	return nil
}

func TestUnreachable(t *testing.T) {
	cfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:1"), RetryMaxAttempts: 1}
	_, err := NewUnwrapper(cfg).Unwrap(t.Context(), UnwrapRequest{Token: "t.o.k", RoleARN: appRole, SessionName: "s1", KeyID: "k", Binding: Binding{VolumeID: "vol-1"}})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Unwrap = %v", err)
	}
	if _, err := NewUnwrapper(aws.Config{}).Unwrap(t.Context(), UnwrapRequest{KeyID: "k"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("no region: %v", err)
	}
}

func TestRegionOf(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"arn:aws:kms:eu-west-1:123456789012:key/abc", "eu-west-1"},
		{"arn:aws-cn:kms:cn-north-1:123456789012:alias/x", "cn-north-1"},
		{"alias/x", "us-east-1"},
		{"1234abcd-12ab-34cd-56ef-1234567890ab", "us-east-1"},
		{"arn:aws:iam::123456789012:role/x", "us-east-1"},
	} {
		if got := regionOf(tc.key, "us-east-1"); got != tc.want {
			t.Errorf("regionOf(%s) = %s, want %s", tc.key, got, tc.want)
		}
	}
}
