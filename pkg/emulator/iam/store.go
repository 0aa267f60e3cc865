// Package iam is the identity side of the EC2 emulator's account: OIDC
// identity providers, roles with trust policies, long-term access keys, and
// the temporary credentials STS issues for a verified web identity token.
// The emulator's STS (AssumeRoleWithWebIdentity) asks it to verify a token
// and issue credentials; its KMS asks it who signed a request and evaluates
// key policies with its policy language. Nothing here is reachable from the
// EC2 API: the EC2 endpoint keeps accepting any signature.
package iam

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Store is the account's identities and the sessions STS issued. It is
// safe for concurrent use.
type Store struct {
	account string
	now     func() time.Time

	mu       sync.RWMutex
	cfg      Config
	sessions map[string]*Session // by access key ID
}

// New checks cfg and returns the store of account. now is the clock that
// judges tokens and credentials; nil means time.Now.
func New(account string, cfg Config, now func() time.Time) (*Store, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &Store{account: account, now: now, cfg: cfg, sessions: map[string]*Session{}}, nil
}

// Account is the account ID every identity belongs to.
func (s *Store) Account() string { return s.account }

// Config is the configuration in force, with the access keys' secrets left out.
func (s *Store) Config() Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg.redacted()
}

// SetConfig replaces the configuration. Credentials STS issued stay valid
// until they expire, as in AWS, where changing a role's trust policy does
// not end its sessions; what they may do is judged at each call.
func (s *Store) SetConfig(cfg Config) error {
	if err := cfg.normalize(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = cfg
	klog.V(2).InfoS("IAM configuration replaced", "oidcProviders", len(cfg.OIDCProviders), "roles", len(cfg.Roles), "accessKeys", len(cfg.AccessKeys))
	return nil
}

// Error is a refusal of the emulator's STS or KMS: the AWS error code (a
// Query error's Code, a JSON error's __type), the message and the HTTP
// status the service answers it with.
type Error struct {
	Code    string
	Message string
	Status  int
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error with a formatted message.
func Errorf(code string, status int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Status: status}
}

// Session is a set of temporary credentials STS issued for a role.
type Session struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	Expiration      time.Time
	// RoleARN is the assumed role; AssumedRoleARN the session's own ARN
	// (arn:aws:sts::<account>:assumed-role/<role>/<session name>).
	RoleARN        string
	AssumedRoleARN string
	AssumedRoleID  string
	// Subject, Audience and Provider are what the web identity token said.
	Subject  string
	Audience string
	Provider string
}

// WebIdentityRequest is an AssumeRoleWithWebIdentity request.
type WebIdentityRequest struct {
	RoleARN     string
	SessionName string
	Token       string
	// DurationSeconds is the session's lifetime; zero means an hour.
	DurationSeconds int
}

// sessionKeyPrefix starts the access key IDs of temporary credentials, as
// in AWS.
const sessionKeyPrefix = "ASIA"

// minSession and maxTokenLength are STS's bounds.
const (
	minSession     = 15 * time.Minute
	maxTokenLength = 20000
)

var sessionNamePattern = regexp.MustCompile(`^[\w+=,.@-]{2,64}$`)

// AssumeRoleWithWebIdentity verifies a web identity token (signature with
// its issuer's keys, issuer, audience, expiry) and the role's trust policy,
// and issues temporary credentials for the role. Refusals are *Error with
// STS's codes: InvalidIdentityToken, ExpiredTokenException, AccessDenied,
// ValidationError.
func (s *Store) AssumeRoleWithWebIdentity(in WebIdentityRequest) (*Session, error) {
	now := s.now()
	switch {
	case in.RoleARN == "" || in.SessionName == "" || in.Token == "":
		return nil, Errorf("MissingParameter", http.StatusBadRequest, "RoleArn, RoleSessionName and WebIdentityToken are required")
	case !sessionNamePattern.MatchString(in.SessionName):
		return nil, Errorf("ValidationError", http.StatusBadRequest,
			"1 validation error detected: Value '%s' at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]* and have length 2 to 64", in.SessionName)
	case len(in.Token) > maxTokenLength:
		return nil, Errorf("ValidationError", http.StatusBadRequest, "the web identity token is longer than %d characters", maxTokenLength)
	}
	tok, err := parseJWT(in.Token)
	if err != nil {
		return nil, Errorf("InvalidIdentityToken", http.StatusBadRequest, "%v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	provider, ok := s.providerLocked(tok.claims.Issuer)
	if !ok {
		return nil, Errorf("InvalidIdentityToken", http.StatusBadRequest, "No OpenIDConnect provider found in your account for %s", tok.claims.Issuer)
	}
	if err := tok.verify(provider.JWKS, now); err != nil {
		if errors.Is(err, errTokenExpired) {
			return nil, Errorf("ExpiredTokenException", http.StatusBadRequest, "Token expired: %v", err)
		}
		return nil, Errorf("InvalidIdentityToken", http.StatusBadRequest, "%v", err)
	}
	audience := ""
	for _, a := range tok.claims.Audience {
		if slices.Contains(provider.ClientIDs, a) {
			audience = a
			break
		}
	}
	if audience == "" {
		return nil, Errorf("InvalidIdentityToken", http.StatusBadRequest, "Incorrect token audience %q: the provider %s accepts %s",
			strings.Join(tok.claims.Audience, ","), provider.URL, strings.Join(provider.ClientIDs, ", "))
	}
	role, ok := s.roleLocked(in.RoleARN)
	providerARN := ProviderARN(s.account, provider.URL)
	host := providerHost(provider.URL)
	allowed := ok && role.TrustPolicy.Allows(Request{
		Principals: []string{providerARN},
		Account:    s.account,
		Action:     "sts:AssumeRoleWithWebIdentity",
		Resource:   in.RoleARN,
		Context: map[string]string{
			host + ":sub":           tok.claims.Subject,
			host + ":aud":           audience,
			"sts:RoleSessionName":   in.SessionName,
			"aws:FederatedProvider": providerARN,
		},
	})
	if !allowed {
		// AWS says the same whether the role is missing or does not trust
		// the caller, so a caller cannot probe which roles exist.
		return nil, Errorf("AccessDenied", http.StatusForbidden, "Not authorized to perform sts:AssumeRoleWithWebIdentity")
	}
	duration := time.Duration(in.DurationSeconds) * time.Second
	maxSession := defaultMaxSession
	if role.MaxSessionSeconds != 0 {
		maxSession = time.Duration(role.MaxSessionSeconds) * time.Second
	}
	switch {
	case in.DurationSeconds == 0:
		duration = min(time.Hour, maxSession)
	case duration < minSession:
		return nil, Errorf("ValidationError", http.StatusBadRequest, "DurationSeconds %d is below the minimum of 900", in.DurationSeconds)
	case duration > maxSession:
		return nil, Errorf("ValidationError", http.StatusBadRequest,
			"The requested DurationSeconds exceeds the MaxSessionDuration set for this role.")
	}
	roleID := roleID(in.RoleARN)
	sess := &Session{
		AccessKeyID:     sessionKeyPrefix + randomString(16),
		SecretAccessKey: randomBase64(30),
		SessionToken:    randomBase64(180),
		Expiration:      now.Add(duration).UTC().Truncate(time.Second),
		RoleARN:         in.RoleARN,
		AssumedRoleARN:  fmt.Sprintf("arn:aws:sts::%s:assumed-role/%s/%s", s.account, role.Name, in.SessionName),
		AssumedRoleID:   roleID + ":" + in.SessionName,
		Subject:         tok.claims.Subject,
		Audience:        audience,
		Provider:        providerARN,
	}
	s.purgeExpiredLocked(now)
	s.sessions[sess.AccessKeyID] = sess
	klog.V(2).InfoS("Issued web identity credentials", "role", in.RoleARN, "session", in.SessionName, "subject", sess.Subject,
		"accessKeyID", sess.AccessKeyID, "expiration", sess.Expiration)
	return sess, nil
}

func (s *Store) providerLocked(issuer string) (OIDCProvider, bool) {
	for _, p := range s.cfg.OIDCProviders {
		if providerHost(p.URL) == providerHost(issuer) && strings.HasPrefix(issuer, "https://") {
			return p, true
		}
	}
	return OIDCProvider{}, false
}

func (s *Store) roleLocked(arn string) (Role, bool) {
	for _, r := range s.cfg.Roles {
		if RoleARN(s.account, r.Path, r.Name) == arn {
			return r, true
		}
	}
	return Role{}, false
}

// rolePoliciesLocked are the identity-based policies of the role with this
// ARN, none when no declared role has it.
func (s *Store) rolePoliciesLocked(arn string) []*Policy {
	r, _ := s.roleLocked(arn)
	return r.Policies
}

func (s *Store) purgeExpiredLocked(now time.Time) {
	for id, sess := range s.sessions {
		if !now.Before(sess.Expiration) {
			delete(s.sessions, id)
		}
	}
}

// Caller is who signed a request: the ARNs it counts as in policies.
type Caller struct {
	// ARN is the caller's own ARN (an assumed-role ARN for a session, the
	// access key's principal otherwise); KMS names it in its refusals.
	ARN string
	// Principals are every ARN a policy's principal may name to mean this
	// caller: its own, its role's, and its account's root.
	Principals []string
	// PrincipalARN is the aws:PrincipalArn condition key: the role of a
	// session, the key's principal otherwise.
	PrincipalARN string
	// Account is the caller's account.
	Account string
	// Policies are the caller's identity-based policies, which must allow
	// what a resource-based policy grants only to the caller's account.
	Policies []*Policy
}

// Decide is what the caller's identity-based policies say of r: Denied if
// one denies it, Allowed if one allows it, NotAllowed otherwise.
func (c Caller) Decide(r Request) Decision {
	d := NotAllowed
	for _, p := range c.Policies {
		d = max(d, p.Decide(r))
	}
	return d
}

// Credential is what verifying a signature needs to know about an access key.
type Credential struct {
	Secret string
	// SessionToken is the token temporary credentials must come with; empty
	// for long-term keys.
	SessionToken string
	Caller       Caller
}

// Reasons a signed request's credentials are refused.
var (
	// ErrUnknownAccessKey: no declared key and no live session has this ID.
	ErrUnknownAccessKey = errors.New("the security token included in the request is invalid")
	// ErrCredentialsExpired: the session that issued the key has expired.
	ErrCredentialsExpired = errors.New("the security token included in the request is expired")
)

// Credential returns the secret and identity of an access key: a declared
// long-term key, or temporary credentials STS issued and that have not
// expired.
func (s *Store) Credential(accessKeyID string) (Credential, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sess, ok := s.sessions[accessKeyID]; ok {
		if !s.now().Before(sess.Expiration) {
			return Credential{}, ErrCredentialsExpired
		}
		return Credential{Secret: sess.SecretAccessKey, SessionToken: sess.SessionToken, Caller: Caller{
			ARN:          sess.AssumedRoleARN,
			Principals:   []string{sess.AssumedRoleARN, sess.RoleARN, RootARN(s.account)},
			PrincipalARN: sess.RoleARN,
			Account:      s.account,
			Policies:     s.rolePoliciesLocked(sess.RoleARN),
		}}, nil
	}
	for _, k := range s.cfg.AccessKeys {
		if k.ID == accessKeyID {
			return Credential{Secret: k.Secret, Caller: Caller{
				ARN:          k.Principal,
				Principals:   []string{k.Principal, RootARN(accountOf(k.Principal))},
				PrincipalARN: k.Principal,
				Account:      accountOf(k.Principal),
				Policies:     append(slices.Clone(k.Policies), s.rolePoliciesLocked(k.Principal)...),
			}}, nil
		}
	}
	return Credential{}, ErrUnknownAccessKey
}

// accountOf is the account ID field of an ARN.
func accountOf(arn string) string {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) < 6 {
		return ""
	}
	return parts[4]
}

// roleID is a stable role ID (AROA…) derived from the role's ARN.
func roleID(arn string) string {
	sum := sha256.Sum256([]byte(arn))
	return "AROA" + base32.StdEncoding.EncodeToString(sum[:])[:17]
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base32.StdEncoding.EncodeToString(b)[:n]
}

func randomBase64(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}
