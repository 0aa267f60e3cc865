package iam

import (
	"strings"
	"testing"
)

func TestParsePolicyRefusesWhatItCannotEvaluate(t *testing.T) {
	tests := []struct {
		name, doc, wantErr string
	}{
		{name: "single statement object", doc: `{"Statement":{"Effect":"Allow","Principal":"*","Action":"kms:*","Resource":"*"}}`},
		{name: "list and Id", doc: `{"Version":"2012-10-17","Id":"key-default-1","Statement":[{"Sid":"a","Effect":"Deny","Principal":{"AWS":["arn:aws:iam::123456789012:root"]},"Action":["kms:Decrypt"],"Resource":"*"}]}`},
		{name: "no statement", doc: `{"Version":"2012-10-17"}`, wantErr: "no Statement"},
		{name: "bad effect", doc: `{"Statement":[{"Effect":"Maybe","Action":"kms:*"}]}`, wantErr: "Effect"},
		{name: "no action", doc: `{"Statement":[{"Effect":"Allow","Principal":"*"}]}`, wantErr: "no Action"},
		{name: "NotAction", doc: `{"Statement":[{"Effect":"Allow","NotAction":"kms:*"}]}`, wantErr: "NotAction"},
		{name: "unknown operator", doc: `{"Statement":[{"Effect":"Allow","Action":"kms:*","Condition":{"NumericLessThan":{"x":"1"}}}]}`, wantErr: "NumericLessThan"},
		{name: "principal word", doc: `{"Statement":[{"Effect":"Allow","Principal":"everyone","Action":"kms:*"}]}`, wantErr: "principal"},
		{name: "canonical user", doc: `{"Statement":[{"Effect":"Allow","Principal":{"CanonicalUser":"x"},"Action":"kms:*"}]}`, wantErr: "principal"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePolicy([]byte(tc.doc))
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestPolicyAllows(t *testing.T) {
	const account = "123456789012"
	role := "arn:aws:iam::123456789012:role/app"
	session := "arn:aws:sts::123456789012:assumed-role/app/pod"
	caller := []string{session, role, RootARN(account)}
	keyPolicy := `{"Statement":[
		{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::123456789012:role/app"},"Action":["kms:Decrypt","kms:DescribeKey"],"Resource":"*",
		 "Condition":{"StringLike":{"kms:EncryptionContext:diskplane:volume-id":"vol-*"}}},
		{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::123456789012:role/admin"},"Action":"kms:*","Resource":"*"},
		{"Effect":"Deny","Principal":"*","Action":"kms:Decrypt","Resource":"*","Condition":{"StringEquals":{"kms:EncryptionContext:diskplane:volume-id":"vol-forbidden"}}}
	]}`
	p, err := ParsePolicy([]byte(keyPolicy))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  Request
		want bool
	}{
		{name: "role decrypts its volumes", want: true,
			req: Request{Principals: caller, Account: account, Action: "kms:Decrypt", Context: map[string]string{"kms:EncryptionContext:diskplane:volume-id": "vol-1"}}},
		{name: "action names ignore case", want: true,
			req: Request{Principals: caller, Account: account, Action: "KMS:decrypt", Context: map[string]string{"KMS:EncryptionContext:diskplane:volume-id": "vol-1"}}},
		{name: "condition key missing", want: false,
			req: Request{Principals: caller, Account: account, Action: "kms:Decrypt"}},
		{name: "condition value wrong", want: false,
			req: Request{Principals: caller, Account: account, Action: "kms:Decrypt", Context: map[string]string{"kms:EncryptionContext:diskplane:volume-id": "snap-1"}}},
		{name: "action not granted", want: false,
			req: Request{Principals: caller, Account: account, Action: "kms:Encrypt", Context: map[string]string{"kms:EncryptionContext:diskplane:volume-id": "vol-1"}}},
		{name: "other role", want: false,
			req: Request{Principals: []string{"arn:aws:iam::123456789012:role/other"}, Account: account, Action: "kms:DescribeKey"}},
		{name: "explicit deny wins", want: false,
			req: Request{Principals: []string{"arn:aws:iam::123456789012:role/admin"}, Account: account, Action: "kms:Decrypt", Context: map[string]string{"kms:EncryptionContext:diskplane:volume-id": "vol-forbidden"}}},
		{name: "wildcard action", want: true,
			req: Request{Principals: []string{"arn:aws:iam::123456789012:role/admin"}, Account: account, Action: "kms:DisableKey"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.Allows(tc.req); got != tc.want {
				t.Fatalf("Allows = %t, want %t", got, tc.want)
			}
		})
	}
}

// TestPolicyPrincipals: a statement naming the caller, its role or anyone
// allows outright; one naming only the caller's account (its root or its
// bare ID) delegates to the caller's identity-based policies, unless the
// caller is that root user itself.
func TestPolicyPrincipals(t *testing.T) {
	const account = "123456789012"
	session := Request{Principals: []string{"arn:aws:sts::123456789012:assumed-role/app/x", "arn:aws:iam::123456789012:role/app", RootARN(account)},
		Account: account, Action: "kms:Decrypt", Resource: "arn:aws:kms:us-east-1:123456789012:key/k1"}
	root := session
	root.Principals = []string{RootARN(account), RootARN(account)}
	tests := []struct {
		principal string
		caller    Request
		want      Decision
	}{
		{`"*"`, session, Allowed},
		{`{"AWS":"*"}`, session, Allowed},
		{`{"AWS":"123456789012"}`, session, AllowedToAccount},
		{`{"AWS":"arn:aws:iam::123456789012:root"}`, session, AllowedToAccount},
		{`{"AWS":["arn:aws:iam::123456789012:root","arn:aws:iam::123456789012:role/app"]}`, session, Allowed},
		{`{"AWS":"arn:aws:iam::123456789012:root"}`, root, Allowed},
		{`{"AWS":"123456789012"}`, root, Allowed},
		{`{"AWS":"arn:aws:iam::999999999999:root"}`, session, NotAllowed},
		{`{"AWS":"arn:aws:iam::123456789012:role/app"}`, session, Allowed},
		{`{"AWS":"arn:aws:sts::123456789012:assumed-role/app/x"}`, session, Allowed},
		{`{"AWS":"arn:aws:sts::123456789012:assumed-role/app/y"}`, session, NotAllowed},
		{`{"Federated":"arn:aws:iam::123456789012:oidc-provider/example.com"}`, session, NotAllowed},
	}
	for _, tc := range tests {
		p, err := ParsePolicy([]byte(`{"Statement":[{"Effect":"Allow","Principal":` + tc.principal + `,"Action":"kms:*","Resource":"arn:aws:kms:*:123456789012:key/*"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Decide(tc.caller); got != tc.want {
			t.Errorf("principal %s, caller %s: Decide = %d, want %d", tc.principal, tc.caller.Principals[0], got, tc.want)
		}
		if got := p.Allows(tc.caller); got != (tc.want == Allowed) {
			t.Errorf("principal %s, caller %s: Allows = %t", tc.principal, tc.caller.Principals[0], got)
		}
	}
}

// TestIdentityPolicies: a caller's identity-based policies (no principal)
// allow what they name, an explicit deny in any of them wins, and none
// means not allowed.
func TestIdentityPolicies(t *testing.T) {
	allowShop := mustParse(t, `{"Statement":[{"Effect":"Allow","Action":"kms:Decrypt","Resource":"arn:aws:kms:*:123456789012:key/*",
		"Condition":{"StringEquals":{"kms:EncryptionContext:diskplane:namespace":"shop"}}}]}`)
	denyAll := mustParse(t, `{"Statement":[{"Effect":"Deny","Action":"kms:*","Resource":"*"}]}`)
	req := func(namespace string) Request {
		return Request{Principals: []string{"arn:aws:iam::123456789012:role/app"}, Account: "123456789012", Action: "kms:Decrypt",
			Resource: "arn:aws:kms:us-east-1:123456789012:key/k1", Context: map[string]string{"kms:EncryptionContext:diskplane:namespace": namespace}}
	}
	tests := []struct {
		name      string
		policies  []*Policy
		namespace string
		want      Decision
	}{
		{name: "no policies", namespace: "shop", want: NotAllowed},
		{name: "its namespace", policies: []*Policy{allowShop}, namespace: "shop", want: Allowed},
		{name: "another namespace", policies: []*Policy{allowShop}, namespace: "bank", want: NotAllowed},
		{name: "an explicit deny wins", policies: []*Policy{allowShop, denyAll}, namespace: "shop", want: Denied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Caller{Policies: tc.policies}).Decide(req(tc.namespace)); got != tc.want {
				t.Fatalf("Decide = %d, want %d", got, tc.want)
			}
		})
	}
}

func mustParse(t *testing.T, doc string) *Policy {
	t.Helper()
	p, err := ParsePolicy([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNegatedConditions(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:*",
		"Condition":{"StringNotLike":{"h:sub":"system:serviceaccount:kube-system:*"},"StringEqualsIgnoreCase":{"h:aud":"STS.amazonaws.com"}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ctx  map[string]string
		want bool
	}{
		{map[string]string{"h:sub": "system:serviceaccount:app:db", "h:aud": "sts.amazonaws.com"}, true},
		{map[string]string{"h:sub": "system:serviceaccount:kube-system:x", "h:aud": "sts.amazonaws.com"}, false},
		{map[string]string{"h:aud": "sts.amazonaws.com"}, true}, // an absent key passes a negated operator
		{map[string]string{"h:sub": "system:serviceaccount:app:db", "h:aud": "other"}, false},
	} {
		if got := p.Allows(Request{Action: "sts:AssumeRoleWithWebIdentity", Context: tc.ctx}); got != tc.want {
			t.Errorf("context %v: Allows = %t, want %t", tc.ctx, got, tc.want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, value string
		want           bool
	}{
		{"*", "arn:aws:kms:us-east-1:1:key/a", true},
		{"arn:aws:kms:*:1:key/*", "arn:aws:kms:us-east-1:1:key/a", true},
		{"system:serviceaccount:app:*", "system:serviceaccount:app:db", true},
		{"system:serviceaccount:app:?b", "system:serviceaccount:app:db", true},
		{"system:serviceaccount:app:db", "system:serviceaccount:app:dbx", false},
		{"a[b]", "a[b]", true},
		{`a\b`, `a\b`, true},
	} {
		if got := globMatch(tc.pattern, tc.value); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %t, want %t", tc.pattern, tc.value, got, tc.want)
		}
	}
}
