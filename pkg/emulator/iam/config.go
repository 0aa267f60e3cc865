package iam

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Config is every identity the emulated account declares: the OIDC
// providers whose tokens STS accepts, the roles that can be assumed with
// them, and long-term access keys (a controller's credentials). It is read
// from --iam-file at start and replaced through the admin API (PUT /iam).
type Config struct {
	OIDCProviders []OIDCProvider `json:"oidcProviders,omitempty"`
	Roles         []Role         `json:"roles,omitempty"`
	AccessKeys    []AccessKey    `json:"accessKeys,omitempty"`
}

// OIDCProvider is an IAM OIDC identity provider: the issuer of the tokens
// (a Kubernetes cluster's service-account issuer), the audiences it accepts
// (IAM's client IDs) and the issuer's signing keys. AWS fetches the keys
// from the issuer's discovery document; the emulator is given them.
type OIDCProvider struct {
	// URL is the issuer, exactly as the tokens' iss claim says, e.g.
	// https://kubernetes.default.svc.cluster.local.
	URL string `json:"url"`
	// ClientIDs are the audiences accepted; empty means sts.amazonaws.com.
	ClientIDs []string `json:"clientIds,omitempty"`
	// JWKS is the issuer's key set.
	JWKS JWKS `json:"jwks"`
}

// DefaultAudience is the audience IAM expects in web identity tokens.
const DefaultAudience = "sts.amazonaws.com"

// Role is an IAM role that web identities may assume.
type Role struct {
	// Name is the role's name; its ARN is arn:aws:iam::<account>:role<Path><Name>.
	Name string `json:"name"`
	// Path is the role's path; empty means "/".
	Path string `json:"path,omitempty"`
	// TrustPolicy says who may assume the role (sts:AssumeRoleWithWebIdentity,
	// a Federated principal, conditions on <issuer>:sub and <issuer>:aud).
	TrustPolicy *Policy `json:"trustPolicy"`
	// MaxSessionSeconds bounds DurationSeconds; zero means 3600.
	MaxSessionSeconds int `json:"maxSessionSeconds,omitempty"`
	// Policies are the role's identity-based (inline) policies: what its
	// sessions may do where a resource-based policy names only the account,
	// as a KMS key policy's "Enable IAM User Permissions" statement does.
	Policies []*Policy `json:"policies,omitempty"`
}

// AccessKey is a long-term credential of a principal (an IAM user, or a
// role's credentials handed out by other means), for callers that sign
// their requests without STS: the controller's KMS calls.
type AccessKey struct {
	ID     string `json:"accessKeyId"`
	Secret string `json:"secretAccessKey,omitempty"`
	// Principal is the ARN the key acts as, e.g.
	// arn:aws:iam::123456789012:role/diskplane-controller.
	Principal string `json:"principal"`
	// Policies are the principal's identity-based policies (an IAM user's);
	// a principal that is a declared role has that role's policies too.
	Policies []*Policy `json:"policies,omitempty"`
}

// defaultMaxSession is IAM's default maximum session duration of a role.
const defaultMaxSession = time.Hour

var (
	roleNamePattern    = regexp.MustCompile(`^[\w+=,.@-]{1,64}$`)
	rolePathPattern    = regexp.MustCompile(`^/([\x21-\x7e]*/)?$`)
	accessKeyIDPattern = regexp.MustCompile(`^[\w.-]{1,128}$`)
	principalPattern   = regexp.MustCompile(`^arn:aws[\w-]*:(iam|sts)::\d{12}:\S+$`)
)

// normalize checks a configuration and fills its defaults.
func (c *Config) normalize() error {
	issuers := map[string]bool{}
	for i := range c.OIDCProviders {
		p := &c.OIDCProviders[i]
		u, err := url.Parse(p.URL)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("OIDC provider %q: the URL must be an https URL without query or fragment, as IAM requires", p.URL)
		}
		if issuers[providerHost(p.URL)] {
			return fmt.Errorf("OIDC provider %q is declared twice", p.URL)
		}
		issuers[providerHost(p.URL)] = true
		if len(p.ClientIDs) == 0 {
			p.ClientIDs = []string{DefaultAudience}
		}
		if err := p.JWKS.check(); err != nil {
			return fmt.Errorf("OIDC provider %q: %w", p.URL, err)
		}
	}
	names := map[string]bool{}
	for i := range c.Roles {
		r := &c.Roles[i]
		if r.Path == "" {
			r.Path = "/"
		}
		switch {
		case !roleNamePattern.MatchString(r.Name):
			return fmt.Errorf("role %q: a role name is 1 to 64 letters, digits and +=,.@_-", r.Name)
		case !rolePathPattern.MatchString(r.Path):
			return fmt.Errorf("role %q: path %q must start and end with /", r.Name, r.Path)
		case names[strings.ToLower(r.Name)]:
			return fmt.Errorf("role %q is declared twice (role names do not differ by case)", r.Name)
		case r.TrustPolicy == nil:
			return fmt.Errorf("role %q has no trust policy", r.Name)
		case r.MaxSessionSeconds != 0 && (r.MaxSessionSeconds < 3600 || r.MaxSessionSeconds > 43200):
			return fmt.Errorf("role %q: maxSessionSeconds %d: IAM allows 3600 to 43200", r.Name, r.MaxSessionSeconds)
		}
		if err := checkIdentityPolicies(r.Policies); err != nil {
			return fmt.Errorf("role %q: %w", r.Name, err)
		}
		names[strings.ToLower(r.Name)] = true
	}
	keys := map[string]bool{}
	for _, k := range c.AccessKeys {
		switch {
		case !accessKeyIDPattern.MatchString(k.ID):
			return fmt.Errorf("access key %q: want letters, digits, '.', '_' or '-'", k.ID)
		case strings.HasPrefix(k.ID, sessionKeyPrefix):
			return fmt.Errorf("access key %q: keys starting with %s are STS's", k.ID, sessionKeyPrefix)
		case k.Secret == "":
			return fmt.Errorf("access key %q has no secretAccessKey", k.ID)
		case !principalPattern.MatchString(k.Principal):
			return fmt.Errorf("access key %q: principal %q is not an IAM or STS ARN", k.ID, k.Principal)
		case keys[k.ID]:
			return fmt.Errorf("access key %q is declared twice", k.ID)
		}
		if err := checkIdentityPolicies(k.Policies); err != nil {
			return fmt.Errorf("access key %q: %w", k.ID, err)
		}
		keys[k.ID] = true
	}
	return nil
}

// checkIdentityPolicies refuses an identity-based policy that names a
// principal: IAM does (the policy applies to whoever holds it).
func checkIdentityPolicies(policies []*Policy) error {
	for i, p := range policies {
		if p == nil {
			return fmt.Errorf("policy %d is empty", i)
		}
		for j, st := range p.Statement {
			if st.Principal != nil {
				return fmt.Errorf("policy %d, statement %d: an identity-based policy has no Principal", i, j)
			}
		}
	}
	return nil
}

// ParseConfig reads and checks a configuration document.
func ParseConfig(doc []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(doc, &c); err != nil {
		return Config{}, err
	}
	if err := c.normalize(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// providerHost is an issuer URL without its scheme: how IAM names an OIDC
// provider in its ARN and in condition keys (<host/path>:sub).
func providerHost(issuer string) string {
	return strings.TrimSuffix(strings.TrimPrefix(issuer, "https://"), "/")
}

// ProviderARN is the ARN of the OIDC provider of an issuer.
func ProviderARN(account, issuer string) string {
	return "arn:aws:iam::" + account + ":oidc-provider/" + providerHost(issuer)
}

// RoleARN is the ARN of a role.
func RoleARN(account, path, name string) string {
	if path == "" {
		path = "/"
	}
	return "arn:aws:iam::" + account + ":role" + path + name
}

// redacted is the configuration with every secret left out, for the admin
// API's answers.
func (c Config) redacted() Config {
	out := c
	out.AccessKeys = slices.Clone(c.AccessKeys)
	for i := range out.AccessKeys {
		out.AccessKeys[i].Secret = ""
	}
	return out
}
