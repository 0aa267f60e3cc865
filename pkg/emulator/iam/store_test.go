package iam_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/iam/iamtest"
)

const account = "123456789012"

func newStore(t *testing.T, issuer *iamtest.Issuer, now func() time.Time) *iam.Store {
	t.Helper()
	s, err := iam.New(account, iam.Config{
		OIDCProviders: []iam.OIDCProvider{issuer.Provider()},
		Roles: []iam.Role{
			{Name: "app", TrustPolicy: issuer.TrustPolicy(account, iamtest.ServiceAccountSubject("shop", "app"))},
			{Name: "any-in-shop", Path: "/workloads/", TrustPolicy: issuer.TrustPolicy(account, "system:serviceaccount:shop:*"), MaxSessionSeconds: 7200},
		},
		AccessKeys: []iam.AccessKey{{ID: "controller", Secret: "s3cret", Principal: "arn:aws:iam::123456789012:role/diskplane-controller"}},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAssumeRoleWithWebIdentity(t *testing.T) {
	issuer := iamtest.NewIssuer(t, "https://kubernetes.default.svc.cluster.local")
	other := iamtest.NewIssuer(t, "https://kubernetes.default.svc.cluster.local")
	stranger := iamtest.NewIssuer(t, "https://oidc.example.com/id/1")
	s := newStore(t, issuer, nil)
	appRole := iam.RoleARN(account, "/", "app")
	shopRole := iam.RoleARN(account, "/workloads/", "any-in-shop")
	app := iamtest.ServiceAccountSubject("shop", "app")
	tests := []struct {
		name     string
		in       iam.WebIdentityRequest
		wantCode string
	}{
		{name: "trusted subject", in: iam.WebIdentityRequest{RoleARN: appRole, SessionName: "shop.app-0", Token: issuer.Token(t, app, "sts.amazonaws.com", time.Hour)}},
		{name: "subject pattern and a role path", in: iam.WebIdentityRequest{RoleARN: shopRole, SessionName: "shop.web-0", DurationSeconds: 7200,
			Token: issuer.Token(t, iamtest.ServiceAccountSubject("shop", "web"), "sts.amazonaws.com", time.Hour)}},
		{name: "other subject", wantCode: "AccessDenied", in: iam.WebIdentityRequest{RoleARN: appRole, SessionName: "shop.web-0",
			Token: issuer.Token(t, iamtest.ServiceAccountSubject("shop", "web"), "sts.amazonaws.com", time.Hour)}},
		{name: "missing role", wantCode: "AccessDenied", in: iam.WebIdentityRequest{RoleARN: iam.RoleARN(account, "/", "nope"), SessionName: "s1",
			Token: issuer.Token(t, app, "sts.amazonaws.com", time.Hour)}},
		{name: "audience the provider does not accept", wantCode: "InvalidIdentityToken", in: iam.WebIdentityRequest{RoleARN: appRole, SessionName: "s1",
			Token: issuer.Token(t, app, "vault", time.Hour)}},
		{name: "expired", wantCode: "ExpiredTokenException", in: iam.WebIdentityRequest{RoleARN: appRole, SessionName: "s1",
			Token: issuer.Token(t, app, "sts.amazonaws.com", -time.Minute)}},
		{name: "signed with another key by the same issuer name", wantCode: "InvalidIdentityToken", in: iam.WebIdentityRequest{RoleARN: appRole, SessionName: "s1",
			Token: other.Token(t, app, "sts.amazonaws.com", time.Hour)}},
		{name: "unknown issuer", wantCode: "InvalidIdentityToken", in: iam.WebIdentityRequest{RoleARN: appRole, SessionName: "s1",
			Token: stranger.Token(t, app, "sts.amazonaws.com", time.Hour)}},
		{name: "not a JWT", wantCode: "InvalidIdentityToken", in: iam.WebIdentityRequest{RoleARN: appRole, SessionName: "s1", Token: "abc.def"}},
		{name: "session name", wantCode: "ValidationError", in: iam.WebIdentityRequest{RoleARN: appRole, SessionName: "shop/app",
			Token: issuer.Token(t, app, "sts.amazonaws.com", time.Hour)}},
		{name: "too long a session", wantCode: "ValidationError", in: iam.WebIdentityRequest{RoleARN: appRole, SessionName: "s1", DurationSeconds: 7200,
			Token: issuer.Token(t, app, "sts.amazonaws.com", time.Hour)}},
		{name: "too short a session", wantCode: "ValidationError", in: iam.WebIdentityRequest{RoleARN: appRole, SessionName: "s1", DurationSeconds: 60,
			Token: issuer.Token(t, app, "sts.amazonaws.com", time.Hour)}},
		{name: "no token", wantCode: "MissingParameter", in: iam.WebIdentityRequest{RoleARN: appRole, SessionName: "s1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sess, err := s.AssumeRoleWithWebIdentity(tc.in)
			if tc.wantCode != "" {
				var e *iam.Error
				if !errors.As(err, &e) || e.Code != tc.wantCode {
					t.Fatalf("error = %v, want code %s", err, tc.wantCode)
				}
				if strings.Contains(e.Message, tc.in.Token) && tc.in.Token != "" {
					t.Fatalf("the refusal repeats the token: %s", e.Message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(sess.AccessKeyID, "ASIA") || sess.RoleARN != tc.in.RoleARN ||
				!strings.HasSuffix(sess.AssumedRoleARN, "/"+tc.in.SessionName) || sess.Audience != "sts.amazonaws.com" {
				t.Fatalf("session = %+v", sess)
			}
			cred, err := s.Credential(sess.AccessKeyID)
			if err != nil || cred.Secret != sess.SecretAccessKey || cred.SessionToken != sess.SessionToken ||
				cred.Caller.ARN != sess.AssumedRoleARN || cred.Caller.PrincipalARN != tc.in.RoleARN {
				t.Fatalf("Credential = %+v, %v", cred, err)
			}
		})
	}
}

func TestTrustPolicyChangeAppliesToTheNextToken(t *testing.T) {
	issuer := iamtest.NewIssuer(t, "https://issuer.example.com")
	s := newStore(t, issuer, nil)
	in := iam.WebIdentityRequest{RoleARN: iam.RoleARN(account, "/", "app"), SessionName: "s1",
		Token: issuer.Token(t, iamtest.ServiceAccountSubject("shop", "app"), "sts.amazonaws.com", time.Hour)}
	sess, err := s.AssumeRoleWithWebIdentity(in)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.Config()
	cfg.Roles = cfg.Roles[1:] // the app role is gone
	cfg.AccessKeys = nil
	if err := s.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AssumeRoleWithWebIdentity(in); err == nil || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("after the role went: %v", err)
	}
	if _, err := s.Credential(sess.AccessKeyID); err != nil {
		t.Fatalf("issued credentials stay valid until they expire: %v", err)
	}
	if _, err := s.Credential("controller"); !errors.Is(err, iam.ErrUnknownAccessKey) {
		t.Fatalf("a removed access key: %v", err)
	}
}

func TestCredentialsExpire(t *testing.T) {
	var now time.Time
	clock := func() time.Time { return now }
	issuer := iamtest.NewIssuer(t, "https://issuer.example.com")
	s := newStore(t, issuer, clock)
	token := issuer.Token(t, iamtest.ServiceAccountSubject("shop", "app"), "sts.amazonaws.com", time.Hour)
	// The store's clock stops after the token is signed by the real one: set
	// before, a second boundary in between made the token not valid yet.
	now = time.Now()
	sess, err := s.AssumeRoleWithWebIdentity(iam.WebIdentityRequest{RoleARN: iam.RoleARN(account, "/", "app"), SessionName: "s1", DurationSeconds: 900,
		Token: token})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(16 * time.Minute)
	if _, err := s.Credential(sess.AccessKeyID); !errors.Is(err, iam.ErrCredentialsExpired) {
		t.Fatalf("Credential after expiry: %v", err)
	}
	cred, err := s.Credential("controller")
	if err != nil || cred.Secret != "s3cret" || cred.SessionToken != "" || cred.Caller.Account != account {
		t.Fatalf("long-term key: %+v, %v", cred, err)
	}
	if got := s.Config().AccessKeys[0].Secret; got != "" {
		t.Fatalf("Config shows the secret %q", got)
	}
}

// TestCallerPolicies: a session carries its role's identity-based
// policies; a long-term key its own and, when its principal is a declared
// role, that role's.
func TestCallerPolicies(t *testing.T) {
	issuer := iamtest.NewIssuer(t, "https://issuer.example.com")
	rolePolicy, err := iam.ParsePolicy([]byte(`{"Statement":[{"Effect":"Allow","Action":"kms:Decrypt","Resource":"*"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	keyPolicy, err := iam.ParsePolicy([]byte(`{"Statement":[{"Effect":"Allow","Action":"kms:Encrypt","Resource":"*"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := iam.New(account, iam.Config{
		OIDCProviders: []iam.OIDCProvider{issuer.Provider()},
		Roles: []iam.Role{{Name: "app", TrustPolicy: issuer.TrustPolicy(account, iamtest.ServiceAccountSubject("shop", "app")),
			Policies: []*iam.Policy{rolePolicy}}},
		AccessKeys: []iam.AccessKey{
			{ID: "as-role", Secret: "s", Principal: iam.RoleARN(account, "/", "app"), Policies: []*iam.Policy{keyPolicy}},
			{ID: "user", Secret: "s", Principal: "arn:aws:iam::123456789012:user/u"},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.AssumeRoleWithWebIdentity(iam.WebIdentityRequest{RoleARN: iam.RoleARN(account, "/", "app"), SessionName: "s1",
		Token: issuer.Token(t, iamtest.ServiceAccountSubject("shop", "app"), "sts.amazonaws.com", time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		want []*iam.Policy
	}{
		{sess.AccessKeyID, []*iam.Policy{rolePolicy}},
		{"as-role", []*iam.Policy{keyPolicy, rolePolicy}},
		{"user", nil},
	} {
		cred, err := s.Credential(tc.key)
		if err != nil {
			t.Fatal(err)
		}
		if len(cred.Caller.Policies) != len(tc.want) {
			t.Fatalf("%s: %d policies, want %d", tc.key, len(cred.Caller.Policies), len(tc.want))
		}
		for i := range tc.want {
			if cred.Caller.Policies[i] != tc.want[i] {
				t.Fatalf("%s: policy %d is not the declared one", tc.key, i)
			}
		}
	}
}

func TestConfigChecks(t *testing.T) {
	issuer := iamtest.NewIssuer(t, "https://issuer.example.com")
	trust := issuer.TrustPolicy(account, "*")
	tests := []struct {
		name    string
		cfg     iam.Config
		wantErr string
	}{
		{name: "http issuer", cfg: iam.Config{OIDCProviders: []iam.OIDCProvider{{URL: "http://x", JWKS: issuer.JWKS()}}}, wantErr: "https"},
		{name: "no keys", cfg: iam.Config{OIDCProviders: []iam.OIDCProvider{{URL: "https://x"}}}, wantErr: "no keys"},
		{name: "bad key", cfg: iam.Config{OIDCProviders: []iam.OIDCProvider{{URL: "https://x", JWKS: iam.JWKS{Keys: []iam.JWK{{Kty: "oct"}}}}}}, wantErr: "not supported"},
		{name: "two providers", cfg: iam.Config{OIDCProviders: []iam.OIDCProvider{issuer.Provider(), issuer.Provider()}}, wantErr: "twice"},
		{name: "role name", cfg: iam.Config{Roles: []iam.Role{{Name: "a/b", TrustPolicy: trust}}}, wantErr: "role name"},
		{name: "role path", cfg: iam.Config{Roles: []iam.Role{{Name: "a", Path: "x", TrustPolicy: trust}}}, wantErr: "path"},
		{name: "no trust", cfg: iam.Config{Roles: []iam.Role{{Name: "a"}}}, wantErr: "trust policy"},
		{name: "twice", cfg: iam.Config{Roles: []iam.Role{{Name: "a", TrustPolicy: trust}, {Name: "A", TrustPolicy: trust}}}, wantErr: "twice"},
		{name: "session bound", cfg: iam.Config{Roles: []iam.Role{{Name: "a", TrustPolicy: trust, MaxSessionSeconds: 60}}}, wantErr: "maxSessionSeconds"},
		{name: "key without secret", cfg: iam.Config{AccessKeys: []iam.AccessKey{{ID: "k", Principal: "arn:aws:iam::123456789012:user/u"}}}, wantErr: "secretAccessKey"},
		{name: "STS-looking key", cfg: iam.Config{AccessKeys: []iam.AccessKey{{ID: "ASIAXYZ", Secret: "s", Principal: "arn:aws:iam::123456789012:user/u"}}}, wantErr: "STS"},
		{name: "principal", cfg: iam.Config{AccessKeys: []iam.AccessKey{{ID: "k", Secret: "s", Principal: "controller"}}}, wantErr: "ARN"},
		{name: "identity policy with a principal", cfg: iam.Config{Roles: []iam.Role{{Name: "a", TrustPolicy: trust, Policies: []*iam.Policy{trust}}}},
			wantErr: "identity-based policy has no Principal"},
		{name: "key's identity policy with a principal", cfg: iam.Config{AccessKeys: []iam.AccessKey{{ID: "k", Secret: "s",
			Principal: "arn:aws:iam::123456789012:user/u", Policies: []*iam.Policy{trust}}}}, wantErr: "identity-based policy has no Principal"},
		{name: "empty identity policy", cfg: iam.Config{Roles: []iam.Role{{Name: "a", TrustPolicy: trust, Policies: []*iam.Policy{nil}}}},
			wantErr: "policy 0 is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := iam.New(account, tc.cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
	doc := `{"oidcProviders":[{"url":"https://issuer.example.com","jwks":{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}}],
		"roles":[{"name":"app","trustPolicy":{"Statement":{"Effect":"Allow","Principal":{"Federated":"arn:aws:iam::123456789012:oidc-provider/issuer.example.com"},"Action":"sts:AssumeRoleWithWebIdentity"}}}]}`
	cfg, err := iam.ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.OIDCProviders[0].ClientIDs; len(got) != 1 || got[0] != iam.DefaultAudience {
		t.Fatalf("client IDs default to %v", got)
	}
}
