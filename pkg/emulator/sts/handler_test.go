package sts_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	sdksts "github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/iam/iamtest"
	"github.com/diskplane/diskplane/pkg/emulator/servicemetrics"
	"github.com/diskplane/diskplane/pkg/emulator/sts"
)

const account = "123456789012"

type fixture struct {
	issuer  *iamtest.Issuer
	store   *iam.Store
	client  *sdksts.Client
	metrics *servicemetrics.Metrics
}

func start(t *testing.T) *fixture {
	t.Helper()
	issuer := iamtest.NewIssuer(t, "https://kubernetes.default.svc.cluster.local")
	store, err := iam.New(account, iam.Config{
		OIDCProviders: []iam.OIDCProvider{issuer.Provider()},
		Roles:         []iam.Role{{Name: "app", TrustPolicy: issuer.TrustPolicy(account, iamtest.ServiceAccountSubject("shop", "app"))}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := servicemetrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sts.NewHandler(store, metrics))
	t.Cleanup(srv.Close)
	client := sdksts.New(sdksts.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), RetryMaxAttempts: 1})
	return &fixture{issuer: issuer, store: store, client: client, metrics: metrics}
}

func TestAssumeRoleWithWebIdentityThroughTheSDK(t *testing.T) {
	f := start(t)
	token := f.issuer.Token(t, iamtest.ServiceAccountSubject("shop", "app"), "sts.amazonaws.com", time.Hour)
	out, err := f.client.AssumeRoleWithWebIdentity(t.Context(), &sdksts.AssumeRoleWithWebIdentityInput{
		RoleArn: aws.String("arn:aws:iam::123456789012:role/app"), RoleSessionName: aws.String("shop.app-0"),
		WebIdentityToken: aws.String(token), DurationSeconds: aws.Int32(900),
	})
	if err != nil {
		t.Fatal(err)
	}
	c := out.Credentials
	if !strings.HasPrefix(aws.ToString(c.AccessKeyId), "ASIA") || aws.ToString(c.SecretAccessKey) == "" || aws.ToString(c.SessionToken) == "" {
		t.Fatalf("credentials = %+v", c)
	}
	if d := time.Until(aws.ToTime(c.Expiration)); d < 14*time.Minute || d > 16*time.Minute {
		t.Fatalf("expiration in %s, want 15m", d)
	}
	if got := aws.ToString(out.AssumedRoleUser.Arn); got != "arn:aws:sts::123456789012:assumed-role/app/shop.app-0" {
		t.Fatalf("assumed role ARN %s", got)
	}
	if aws.ToString(out.SubjectFromWebIdentityToken) != "system:serviceaccount:shop:app" || aws.ToString(out.Audience) != "sts.amazonaws.com" ||
		aws.ToString(out.Provider) != "arn:aws:iam::123456789012:oidc-provider/kubernetes.default.svc.cluster.local" {
		t.Fatalf("answer = %+v", out)
	}
	if _, err := f.store.Credential(aws.ToString(c.AccessKeyId)); err != nil {
		t.Fatalf("the issued key is unknown to IAM: %v", err)
	}
	if n := f.metrics.Count("sts", "AssumeRoleWithWebIdentity", servicemetrics.Success); n != 1 {
		t.Fatalf("counted %d successes", n)
	}
}

func TestRefusalsThroughTheSDK(t *testing.T) {
	f := start(t)
	tests := []struct {
		name     string
		in       sdksts.AssumeRoleWithWebIdentityInput
		wantCode string
	}{
		{name: "subject not trusted", wantCode: "AccessDenied", in: sdksts.AssumeRoleWithWebIdentityInput{
			RoleArn: aws.String("arn:aws:iam::123456789012:role/app"), RoleSessionName: aws.String("s1"),
			WebIdentityToken: aws.String(f.issuer.Token(t, iamtest.ServiceAccountSubject("shop", "other"), "sts.amazonaws.com", time.Hour))}},
		{name: "expired", wantCode: "ExpiredTokenException", in: sdksts.AssumeRoleWithWebIdentityInput{
			RoleArn: aws.String("arn:aws:iam::123456789012:role/app"), RoleSessionName: aws.String("s1"),
			WebIdentityToken: aws.String(f.issuer.Token(t, iamtest.ServiceAccountSubject("shop", "app"), "sts.amazonaws.com", -time.Second))}},
		{name: "garbage", wantCode: "InvalidIdentityToken", in: sdksts.AssumeRoleWithWebIdentityInput{
			RoleArn: aws.String("arn:aws:iam::123456789012:role/app"), RoleSessionName: aws.String("s1"), WebIdentityToken: aws.String("x.y.z")}},
		{name: "session policy", wantCode: "ValidationError", in: sdksts.AssumeRoleWithWebIdentityInput{
			RoleArn: aws.String("arn:aws:iam::123456789012:role/app"), RoleSessionName: aws.String("s1"), Policy: aws.String("{}"),
			WebIdentityToken: aws.String(f.issuer.Token(t, iamtest.ServiceAccountSubject("shop", "app"), "sts.amazonaws.com", time.Hour))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.client.AssumeRoleWithWebIdentity(t.Context(), &tc.in)
			var apiErr smithy.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode() != tc.wantCode {
				t.Fatalf("error = %v, want code %s", err, tc.wantCode)
			}
			if strings.Contains(err.Error(), aws.ToString(tc.in.WebIdentityToken)) {
				t.Fatal("the error repeats the token")
			}
		})
	}
	if n := f.metrics.Count("sts", "AssumeRoleWithWebIdentity", "AccessDenied"); n != 1 {
		t.Fatalf("counted %d AccessDenied", n)
	}
}

// TestWebIdentityProvider is the credentials provider a workload uses:
// the SDK's stscreds with a token fetcher.
func TestWebIdentityProvider(t *testing.T) {
	f := start(t)
	token := f.issuer.Token(t, iamtest.ServiceAccountSubject("shop", "app"), "sts.amazonaws.com", time.Hour)
	p := stscreds.NewWebIdentityRoleProvider(f.client, "arn:aws:iam::123456789012:role/app", tokenFetcher(token))
	creds, err := aws.NewCredentialsCache(p).Retrieve(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(creds.AccessKeyID, "ASIA") || !creds.CanExpire {
		t.Fatalf("credentials = %+v", creds)
	}
}

type tokenFetcher string

func (f tokenFetcher) GetIdentityToken() ([]byte, error) { return []byte(f), nil }
