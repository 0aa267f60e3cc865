package iam

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
)

// Policy is an IAM policy document as AWS writes it: a role's trust policy
// or a KMS key's key policy. The emulator evaluates the part of the policy
// language that trust and key policies use: Allow and Deny statements,
// principals by ARN, account and federated provider, actions and resources
// with wildcards, and string conditions. A document using anything else
// (NotAction, NotPrincipal, other condition operators) is refused when it is
// declared, never half evaluated.
type Policy struct {
	Version   string      `json:"Version,omitempty"`
	Statement []Statement `json:"Statement"`
}

// Statement is one statement of a policy.
type Statement struct {
	Sid       string     `json:"Sid,omitempty"`
	Effect    string     `json:"Effect"`
	Principal *Principal `json:"Principal,omitempty"`
	Action    StringList `json:"Action"`
	Resource  StringList `json:"Resource,omitempty"`
	// Condition maps an operator (StringEquals …) to condition keys and the
	// values each may take.
	Condition map[string]map[string]StringList `json:"Condition,omitempty"`
}

// The effects of a statement.
const (
	EffectAllow = "Allow"
	EffectDeny  = "Deny"
)

// Principal names who a statement applies to: "*" (anyone), or AWS
// principals (account IDs, account roots, roles, assumed roles, users) and
// federated identity providers (an OIDC provider's ARN).
type Principal struct {
	Any       bool       `json:"-"`
	AWS       StringList `json:"AWS,omitempty"`
	Federated StringList `json:"Federated,omitempty"`
	Service   StringList `json:"Service,omitempty"`
}

// UnmarshalJSON reads "*" or an object of principal lists.
func (p *Principal) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		if s != "*" {
			return fmt.Errorf("principal %q: want \"*\" or an object like {\"AWS\": \"arn:…\"}", s)
		}
		*p = Principal{Any: true}
		return nil
	}
	type plain Principal
	var v plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("principal: %w (the emulator knows AWS, Federated and Service principals)", err)
	}
	*p = Principal(v)
	return nil
}

// MarshalJSON writes "*" for anyone, else the object.
func (p Principal) MarshalJSON() ([]byte, error) {
	if p.Any {
		return json.Marshal("*")
	}
	type plain Principal
	return json.Marshal(plain(p))
}

// StringList is a policy field that is one string or a list of them.
type StringList []string

// UnmarshalJSON reads a string or a list of strings.
func (l *StringList) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*l = StringList{s}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return errors.New("want a string or a list of strings")
	}
	*l = list
	return nil
}

// UnmarshalJSON reads a policy whose Statement is one statement or a list.
func (p *Policy) UnmarshalJSON(b []byte) error {
	var raw struct {
		Version   string          `json:"Version"`
		ID        string          `json:"Id"`
		Statement json.RawMessage `json:"Statement"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	p.Version = raw.Version
	trimmed := bytes.TrimSpace(raw.Statement)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		trimmed = append(append([]byte{'['}, trimmed...), ']')
	}
	if len(trimmed) == 0 {
		return errors.New("policy: no Statement")
	}
	dec = json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p.Statement); err != nil {
		return fmt.Errorf("policy statement: %w (the emulator knows Sid, Effect, Principal, Action, Resource and Condition)", err)
	}
	return p.validate()
}

// ParsePolicy reads and checks a policy document.
func ParsePolicy(doc []byte) (*Policy, error) {
	var p Policy
	if err := json.Unmarshal(doc, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// conditionOperators are the condition operators the emulator evaluates,
// by their lower-case names. Keys absent from a request fail the positive
// operators and pass the negated ones, as in IAM.
var conditionOperators = map[string]struct {
	negated bool
	match   func(pattern, value string) bool
}{
	"stringequals":           {match: func(p, v string) bool { return p == v }},
	"stringnotequals":        {negated: true, match: func(p, v string) bool { return p == v }},
	"stringequalsignorecase": {match: strings.EqualFold},
	"stringlike":             {match: globMatch},
	"stringnotlike":          {negated: true, match: globMatch},
}

// validate refuses what the emulator would not evaluate as IAM does.
func (p *Policy) validate() error {
	if len(p.Statement) == 0 {
		return errors.New("policy: no Statement")
	}
	for i, s := range p.Statement {
		switch {
		case s.Effect != EffectAllow && s.Effect != EffectDeny:
			return fmt.Errorf("policy statement %d: Effect %q: want Allow or Deny", i, s.Effect)
		case len(s.Action) == 0:
			return fmt.Errorf("policy statement %d: no Action", i)
		}
		for op := range s.Condition {
			if _, ok := conditionOperators[strings.ToLower(op)]; !ok {
				return fmt.Errorf("policy statement %d: condition operator %q: the emulator evaluates StringEquals, StringNotEquals, StringEqualsIgnoreCase, StringLike and StringNotLike", i, op)
			}
		}
	}
	return nil
}

// Request is what a policy is asked about: who calls (every principal the
// caller counts as), which action on which resource, and the values of the
// condition keys.
type Request struct {
	// Principals are ARNs of AWS principals, the caller's own first (a role
	// session counts as its assumed-role ARN, its role's ARN and its
	// account's root) and, for a web identity, the federated provider's ARN.
	Principals []string
	// Account is the caller's account ID; a principal given as a bare
	// account ID matches it.
	Account  string
	Action   string
	Resource string
	// Context holds the condition keys' values; keys compare without case.
	Context map[string]string
}

// Decision is what one policy says of a request. A resource-based policy
// (a KMS key policy) that allows a request only through a statement naming
// the caller's account (its root, or its bare ID) does not allow it alone:
// it delegates to the account's IAM, and the caller's identity-based
// policies must allow the request too. A statement naming the caller
// itself, its role, "*" or a federated provider allows it outright.
type Decision int

// The decisions, from the weakest.
const (
	// NotAllowed: no statement allows the request (IAM's implicit deny).
	NotAllowed Decision = iota
	// AllowedToAccount: allowed only by naming the caller's account.
	AllowedToAccount
	// Allowed: a statement allows the caller outright.
	Allowed
	// Denied: a Deny statement matches, whatever else allows it.
	Denied
)

// Decide evaluates the request against every statement: a matching Deny
// wins; otherwise the strongest matching Allow decides.
func (p *Policy) Decide(r Request) Decision {
	d := NotAllowed
	for _, s := range p.Statement {
		how := s.matches(r)
		switch {
		case how == NotAllowed:
		case s.Effect == EffectDeny:
			return Denied
		default:
			d = max(d, how)
		}
	}
	return d
}

// Allows reports whether the policy alone allows the request: for a trust
// policy, whose federated principal names the caller outright.
func (p *Policy) Allows(r Request) bool { return p.Decide(r) == Allowed }

// matches says how the statement applies to r: not at all (NotAllowed),
// only through the caller's account, or to the caller itself (Allowed). A
// statement without a principal (an identity-based policy's) applies to
// whoever holds the policy.
func (s Statement) matches(r Request) Decision {
	how := Allowed
	if s.Principal != nil {
		if how = s.Principal.matches(r); how == NotAllowed {
			return NotAllowed
		}
	}
	if !slices.ContainsFunc(s.Action, func(a string) bool { return globMatch(strings.ToLower(a), strings.ToLower(r.Action)) }) {
		return NotAllowed
	}
	if len(s.Resource) > 0 && !slices.ContainsFunc(s.Resource, func(res string) bool { return globMatch(res, r.Resource) }) {
		return NotAllowed
	}
	for op, keys := range s.Condition {
		o := conditionOperators[strings.ToLower(op)]
		for key, patterns := range keys {
			value, present := lookupFold(r.Context, key)
			if !present {
				if !o.negated {
					return NotAllowed
				}
				continue
			}
			hit := slices.ContainsFunc(patterns, func(p string) bool { return o.match(p, value) })
			if hit == o.negated {
				return NotAllowed
			}
		}
	}
	return how
}

// matches says whether the principal names the caller (Allowed), only its
// account (AllowedToAccount; the account's root user itself is named
// outright), or neither.
func (p *Principal) matches(r Request) Decision {
	if p.Any || slices.Contains(p.AWS, "*") {
		return Allowed
	}
	root := RootARN(r.Account)
	callerIsRoot := len(r.Principals) > 0 && r.Principals[0] == root
	how := NotAllowed
	for _, want := range p.AWS {
		switch {
		case want == root || want == r.Account:
			if callerIsRoot {
				return Allowed
			}
			how = AllowedToAccount
		case slices.Contains(r.Principals, want):
			return Allowed
		}
	}
	for _, want := range p.Federated {
		if slices.Contains(r.Principals, want) {
			return Allowed
		}
	}
	return how
}

// lookupFold finds a condition key without regard to case.
func lookupFold(m map[string]string, key string) (string, bool) {
	for k, v := range m {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return "", false
}

// globMatch matches IAM's wildcards: * any run of characters, ? one.
func globMatch(pattern, value string) bool {
	// path.Match treats / specially and [ as a class; IAM does neither, so
	// replace them with characters neither string can hold here.
	escape := strings.NewReplacer("/", "\x00", "[", "\x01", "\\", "\x02")
	ok, err := path.Match(escape.Replace(pattern), escape.Replace(value))
	return err == nil && ok
}

// RootARN is the ARN of an account's root principal.
func RootARN(account string) string { return "arn:aws:iam::" + account + ":root" }
