package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/emulator/iam"
)

// The IAM documents docs/install.md tells users to copy. They are tested
// here because a user pastes them into AWS as they are: a wrong key, action
// or account name fails only there, in a cluster, where nothing says why.
const (
	iamPolicyPath       = "docs/iam-policy.json"
	strictPolicyPath    = "docs/iam-policy-strict.json"
	irsaTrustPath       = "docs/iam/trust-irsa.json"
	podIdentityPath     = "docs/iam/trust-pod-identity.json"
	kmsKeyPolicyPath    = "docs/iam/kms-key-policy.json"
	installDocPath      = "docs/install.md"
	iamPolicyVersion    = "2012-10-17"
	clusterTagValue     = "true" // the value parameters.ClusterTagKey's tag always has
	podIdentityService  = "pods.eks.amazonaws.com"
	webIdentityAudience = "sts.amazonaws.com"
)

// iamStatement is one statement of a policy document, as AWS reads it.
type iamStatement struct {
	Sid          string                                `json:"Sid"`
	Effect       string                                `json:"Effect"`
	Principal    any                                   `json:"Principal"`
	NotPrincipal any                                   `json:"NotPrincipal"`
	Action       any                                   `json:"Action"`
	NotAction    any                                   `json:"NotAction"`
	Resource     any                                   `json:"Resource"`
	NotResource  any                                   `json:"NotResource"`
	Condition    map[string]map[string]json.RawMessage `json:"Condition"`
}

// iamDocument is a whole policy document.
type iamDocument struct {
	Version   string         `json:"Version"`
	ID        string         `json:"Id"`
	Statement []iamStatement `json:"Statement"`
}

// readRepoFile reads a file given by its path from the repository's root.
func readRepoFile(t *testing.T, rel string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// readIAMDocument decodes a policy document strictly: a field IAM does not
// know (a misspelt "Conditon") is an error here, as in IAM.
func readIAMDocument(t *testing.T, rel string) iamDocument {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(readRepoFile(t, rel)))
	dec.DisallowUnknownFields()
	var doc iamDocument
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return doc
}

// stringList reads a policy field that is one string or a list of them.
func stringList(v any) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{v}, nil
	case []any:
		out := make([]string, 0, len(v))
		for _, x := range v {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("%v is not a string", x)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%v is neither a string nor a list of strings", v)
}

// conditionValues reads a condition's values: one string (or boolean) or a
// list of them.
func conditionValues(raw json.RawMessage) ([]string, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	if b, ok := v.(bool); ok {
		return []string{strconv.FormatBool(b)}, nil
	}
	return stringList(v)
}

// iamDocumentPaths lists every IAM document under docs/: the policies
// beside install.md and everything in docs/iam/.
func iamDocumentPaths(t *testing.T) []string {
	t.Helper()
	inIAM, err := filepath.Glob(filepath.Join(repoRoot, "docs", "iam", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{iamPolicyPath, strictPolicyPath}
	for _, p := range inIAM {
		paths = append(paths, "docs/iam/"+filepath.Base(p))
	}
	return paths
}

// actionName is service:Operation, the operation possibly with wildcards.
var actionName = regexp.MustCompile(`^[a-z0-9-]+:[A-Za-z*?]+$`)

// Every IAM document the docs give parses as a policy document IAM would
// take: the current version (the old one has no policy variables and
// treats ${…} literally), a list of statements, each an Allow or a Deny
// with actions named service:Operation, a resource for a policy attached to
// an identity, and no Not* forms, which are easy to get backwards.
func TestIAMDocumentsAreWellFormed(t *testing.T) {
	paths := iamDocumentPaths(t)
	if !slices.Contains(paths, irsaTrustPath) || !slices.Contains(paths, podIdentityPath) || !slices.Contains(paths, kmsKeyPolicyPath) {
		t.Fatalf("docs/iam lacks one of the documents install.md names: %v", paths)
	}
	for _, rel := range paths {
		t.Run(rel, func(t *testing.T) {
			raw := readRepoFile(t, rel)
			var top map[string]json.RawMessage
			if err := json.Unmarshal(raw, &top); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			if s := bytes.TrimSpace(top["Statement"]); len(s) == 0 || s[0] != '[' {
				t.Errorf("Statement is not a list")
			}
			doc := readIAMDocument(t, rel)
			if doc.Version != iamPolicyVersion {
				t.Errorf("Version %q, want %q", doc.Version, iamPolicyVersion)
			}
			if len(doc.Statement) == 0 {
				t.Fatal("no statement")
			}
			sids := map[string]bool{}
			for i, s := range doc.Statement {
				where := fmt.Sprintf("statement %d (%s)", i, s.Sid)
				if s.Sid != "" && sids[s.Sid] {
					t.Errorf("%s: Sid used twice", where)
				}
				sids[s.Sid] = true
				if s.Effect != "Allow" && s.Effect != "Deny" {
					t.Errorf("%s: Effect %q, want Allow or Deny", where, s.Effect)
				}
				if s.NotAction != nil || s.NotResource != nil || s.NotPrincipal != nil {
					t.Errorf("%s: uses NotAction, NotResource or NotPrincipal", where)
				}
				actions, err := stringList(s.Action)
				if err != nil || len(actions) == 0 {
					t.Errorf("%s: no Action (%v)", where, err)
				}
				for _, a := range actions {
					if !actionName.MatchString(a) {
						t.Errorf("%s: action %q is not service:Operation", where, a)
					}
				}
				if s.Principal == nil {
					if res, err := stringList(s.Resource); err != nil || len(res) == 0 {
						t.Errorf("%s: an identity policy's statement without Resource (%v)", where, err)
					}
				}
				for op, keys := range s.Condition {
					for key, raw := range keys {
						if v, err := conditionValues(raw); err != nil || len(v) == 0 {
							t.Errorf("%s: condition %s %s has no value (%v)", where, op, key, err)
						}
					}
				}
			}
		})
	}
}

// placeholder is a word in capitals that a documented sed replaces
// (ACCOUNT_ID, OIDC_PROVIDER, REGION).
var placeholder = regexp.MustCompile(`\b[A-Z][A-Z_]{4,}\b`)

// sedReplacement is one s|WORD|…| expression of a sed command.
var sedReplacement = regexp.MustCompile(`s\|([A-Z][A-Z_]+)\|`)

// Every placeholder in docs/iam's documents is filled by the sed command
// install.md runs on that document: a placeholder left in would reach IAM
// as an account or a provider that does not exist.
func TestIAMPlaceholdersAreFilled(t *testing.T) {
	install := string(readRepoFile(t, installDocPath))
	for _, rel := range iamDocumentPaths(t) {
		if !strings.HasPrefix(rel, "docs/iam/") {
			continue
		}
		t.Run(rel, func(t *testing.T) {
			words := map[string]bool{}
			for _, w := range placeholder.FindAllString(string(readRepoFile(t, rel)), -1) {
				words[w] = true
			}
			filled := map[string]bool{}
			for _, line := range strings.Split(install, "\n") {
				if strings.Contains(line, "sed ") && strings.Contains(line, rel) {
					for _, m := range sedReplacement.FindAllStringSubmatch(line, -1) {
						filled[m[1]] = true
					}
				}
			}
			if len(words) > 0 && len(filled) == 0 {
				t.Fatalf("install.md has no sed command that fills %s's %v", rel, slices.Sorted(maps.Keys(words)))
			}
			for _, w := range slices.Sorted(maps.Keys(words)) {
				if !filled[w] {
					t.Errorf("placeholder %s is not filled by install.md's sed for %s (it fills %v)", w, rel, slices.Sorted(maps.Keys(filled)))
				}
			}
			for _, w := range slices.Sorted(maps.Keys(filled)) {
				if !words[w] {
					t.Errorf("install.md's sed for %s fills %s, which the file does not have", rel, w)
				}
			}
		})
	}
}

// policyActionsOf lists the actions a policy document allows, whatever the
// conditions and resources.
func policyActionsOf(t *testing.T, rel string) []string {
	t.Helper()
	actions := map[string]bool{}
	for _, s := range readIAMDocument(t, rel).Statement {
		if s.Effect != "Allow" {
			continue
		}
		list, err := stringList(s.Action)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		for _, a := range list {
			actions[a] = true
		}
	}
	return slices.Sorted(maps.Keys(actions))
}

// The strict policy narrows resources and conditions only: it allows
// exactly the EC2 actions of docs/iam-policy.json, which
// TestIAMPolicyMatchesTheCloudLayer ties to the calls pkg/cloud makes. A
// missing action would fail in a cluster with UnauthorizedOperation.
func TestStrictIAMPolicyAllowsTheSameActions(t *testing.T) {
	tests := []struct{ name, path string }{
		{"current", iamPolicyPath},
		{"strict", strictPolicyPath},
	}
	want := ec2Operations(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := policyActionsOf(t, tc.path); !slices.Equal(got, want) {
				t.Errorf("%s allows %v\npkg/cloud calls %v", tc.path, got, want)
			}
		})
	}
}

// tagCondition is a condition key on a tag: the tag key is the third group.
var tagCondition = regexp.MustCompile(`^(aws|ec2):(RequestTag|ResourceTag)/(.+)$`)

// driverTagKeys reads the tag keys the driver sets from its sources: the
// string constants named Tag… in pkg/cloud and pkg/driver/parameters, and
// the cluster tag, parameters.ClusterTagKey of cmd/diskplane's
// DefaultDriverName, with the suffix ClusterTagKey appends.
func driverTagKeys(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	consts := map[string]string{}
	var clusterSuffix string
	for _, dir := range []string{"pkg/cloud", "pkg/driver/parameters", "cmd/diskplane"} {
		files, err := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ValueSpec:
					for i, name := range n.Names {
						if i < len(n.Values) {
							if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								v, _ := strconv.Unquote(lit.Value)
								consts[dir+"."+name.Name] = v
							}
						}
					}
				case *ast.FuncDecl:
					if n.Name.Name == "ClusterTagKey" && n.Body != nil {
						ast.Inspect(n.Body, func(m ast.Node) bool {
							if lit, ok := m.(*ast.BasicLit); ok && lit.Kind == token.STRING {
								clusterSuffix, _ = strconv.Unquote(lit.Value)
							}
							return true
						})
					}
				}
				return true
			})
		}
	}
	driverName := consts["cmd/diskplane.DefaultDriverName"]
	if driverName == "" || clusterSuffix == "" {
		t.Fatalf("cannot read the cluster tag: DefaultDriverName %q, ClusterTagKey's suffix %q", driverName, clusterSuffix)
	}
	keys := map[string]bool{driverName + clusterSuffix: true}
	for name, v := range consts {
		if _, n, _ := strings.Cut(name, "."); strings.HasPrefix(n, "Tag") && !strings.HasPrefix(name, "cmd/") {
			keys[v] = true
		}
	}
	if len(keys) < 3 {
		t.Fatalf("found only the tag keys %v", slices.Sorted(maps.Keys(keys)))
	}
	return keys
}

// Every tag a condition of the EC2 policies names is one the driver sets,
// with the value it sets: a condition on a tag the driver never writes
// would lock the controller out of its own volumes.
func TestIAMPolicyTagConditionsUseTheDriversTags(t *testing.T) {
	keys := driverTagKeys(t)
	clusterKey := ""
	for k := range keys {
		if strings.HasSuffix(k, "/cluster") {
			clusterKey = k
		}
	}
	tests := []struct {
		path     string
		wantKeys int // at least this many tag conditions
	}{
		{iamPolicyPath, 2},
		{strictPolicyPath, 4},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			n := 0
			for _, s := range readIAMDocument(t, tc.path).Statement {
				for op, conds := range s.Condition {
					for key, raw := range conds {
						m := tagCondition.FindStringSubmatch(key)
						if m == nil {
							continue
						}
						n++
						if !keys[m[3]] {
							t.Errorf("%s: %s %s: the driver sets no tag %q (it sets %v)", s.Sid, op, key, m[3], slices.Sorted(maps.Keys(keys)))
							continue
						}
						values, err := conditionValues(raw)
						if m[3] == clusterKey && (err != nil || !slices.Equal(values, []string{clusterTagValue})) {
							t.Errorf("%s: %s %s wants %v; the driver sets %q", s.Sid, op, key, values, clusterTagValue)
						}
					}
				}
			}
			if n < tc.wantKeys {
				t.Errorf("%d tag conditions, want at least %d", n, tc.wantKeys)
			}
		})
	}
}

// The strict policy, evaluated by the emulator's IAM policy engine, lets
// the controller use the volumes that carry the cluster tag and no other,
// and attach them to any instance; the current policy lets it use any
// volume. The requests are the ones EC2 authorizes for each call (a volume
// and an instance for AttachVolume, the volume and the new snapshot for
// CreateSnapshot).
func TestStrictIAMPolicyDecisions(t *testing.T) {
	const (
		volume   = "arn:aws:ec2:us-east-1:111122223333:volume/vol-0123456789abcdef0"
		instance = "arn:aws:ec2:us-east-1:111122223333:instance/i-0123456789abcdef0"
		snapshot = "arn:aws:ec2:us-east-1::snapshot/snap-0123456789abcdef0"
	)
	clusterKey := "ebs.csi.diskplane.io/cluster"
	if !driverTagKeys(t)[clusterKey] {
		t.Fatalf("the driver sets no tag %s", clusterKey)
	}
	tagged := map[string]string{"ec2:ResourceTag/" + clusterKey: "true", "aws:ResourceTag/" + clusterKey: "true"}
	otherTag := map[string]string{"ec2:ResourceTag/" + clusterKey: "false", "aws:ResourceTag/" + clusterKey: "false"}
	requestTagged := map[string]string{"aws:RequestTag/" + clusterKey: "true"}
	tests := []struct {
		name, action, resource string
		context                map[string]string
		strict, current        bool
	}{
		{"attach a tagged volume", "ec2:AttachVolume", volume, tagged, true, true},
		{"attach an untagged volume", "ec2:AttachVolume", volume, nil, false, true},
		{"attach a volume tagged false", "ec2:AttachVolume", volume, otherTag, false, true},
		{"attach to an instance", "ec2:AttachVolume", instance, nil, true, true},
		{"detach a tagged volume", "ec2:DetachVolume", volume, tagged, true, true},
		{"detach an untagged volume", "ec2:DetachVolume", volume, nil, false, true},
		{"detach from an instance", "ec2:DetachVolume", instance, nil, true, true},
		{"modify a tagged volume", "ec2:ModifyVolume", volume, tagged, true, true},
		{"modify an untagged volume", "ec2:ModifyVolume", volume, nil, false, true},
		{"snapshot a tagged volume", "ec2:CreateSnapshot", volume, tagged, true, true},
		{"snapshot an untagged volume", "ec2:CreateSnapshot", volume, nil, false, true},
		{"a snapshot created with the cluster tag", "ec2:CreateSnapshot", snapshot, requestTagged, true, true},
		{"a snapshot created untagged", "ec2:CreateSnapshot", snapshot, nil, false, true},
		{"delete a tagged volume", "ec2:DeleteVolume", volume, tagged, true, true},
		{"delete an untagged volume", "ec2:DeleteVolume", volume, nil, false, false},
		{"create a volume with the cluster tag", "ec2:CreateVolume", volume, requestTagged, true, true},
		{"create a volume without it", "ec2:CreateVolume", volume, nil, false, false},
		{"an action neither allows", "ec2:TerminateInstances", instance, nil, false, false},
	}
	policies := map[string]*iam.Policy{}
	for _, rel := range []string{strictPolicyPath, iamPolicyPath} {
		p, err := iam.ParsePolicy(readRepoFile(t, rel))
		if err != nil {
			t.Fatalf("%s: the emulator cannot evaluate it: %v", rel, err)
		}
		policies[rel] = p
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := iam.Request{Account: "111122223333", Action: tc.action, Resource: tc.resource, Context: tc.context}
			for rel, want := range map[string]bool{strictPolicyPath: tc.strict, iamPolicyPath: tc.current} {
				if got := policies[rel].Allows(r); got != want {
					t.Errorf("%s allows %s on %s with %v: %v, want %v", rel, tc.action, tc.resource, tc.context, got, want)
				}
			}
		})
	}
}

// controllerAccount renders the chart's defaults in the namespace
// install.md installs it in and returns the namespace and name of the
// ServiceAccount the controller runs as.
func controllerAccount(t *testing.T) (namespace, name string) {
	t.Helper()
	m := render(t, "")
	d := m.controller()
	name = d.Spec.Template.Spec.ServiceAccountName
	if m.find("ServiceAccount", name) == nil {
		t.Fatalf("the chart makes no ServiceAccount %s", name)
	}
	return d.Namespace, name
}

// The IRSA trust policy, with its placeholders filled as install.md's sed
// fills them and evaluated by the emulator's IAM policy engine, lets the
// chart's controller ServiceAccount, in the namespace install.md installs
// the chart in, assume the role with a token for STS, and nobody else.
func TestIRSATrustPolicyNamesTheControllerAccount(t *testing.T) {
	ns, sa := controllerAccount(t)
	const (
		account  = "111122223333"
		provider = "oidc.eks.us-east-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE"
	)
	doc := strings.NewReplacer("ACCOUNT_ID", account, "OIDC_PROVIDER", provider).Replace(string(readRepoFile(t, irsaTrustPath)))
	policy, err := iam.ParsePolicy([]byte(doc))
	if err != nil {
		t.Fatalf("%s: %v", irsaTrustPath, err)
	}
	providerARN := "arn:aws:iam::" + account + ":oidc-provider/" + provider
	subject := "system:serviceaccount:" + ns + ":" + sa
	tests := []struct {
		name              string
		principal, action string
		sub, aud          string
		want              bool
	}{
		{"the controller's account", providerARN, "sts:AssumeRoleWithWebIdentity", subject, webIdentityAudience, true},
		{"the node's account", providerARN, "sts:AssumeRoleWithWebIdentity", "system:serviceaccount:" + ns + ":diskplane-node", webIdentityAudience, false},
		{"the same name in another namespace", providerARN, "sts:AssumeRoleWithWebIdentity", "system:serviceaccount:default:" + sa, webIdentityAudience, false},
		{"a token for another audience", providerARN, "sts:AssumeRoleWithWebIdentity", subject, "vault", false},
		{"another cluster's provider", "arn:aws:iam::" + account + ":oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/OTHER", "sts:AssumeRoleWithWebIdentity", subject, webIdentityAudience, false},
		{"a plain AssumeRole", providerARN, "sts:AssumeRole", subject, webIdentityAudience, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := iam.Request{
				Principals: []string{tc.principal}, Account: account, Action: tc.action,
				Context: map[string]string{provider + ":sub": tc.sub, provider + ":aud": tc.aud},
			}
			if got := policy.Allows(r); got != tc.want {
				t.Errorf("allows %s for %s (aud %s): %v, want %v", tc.action, tc.sub, tc.aud, got, tc.want)
			}
		})
	}
}

// podIdentityAssociation is install.md's aws eks create-pod-identity-association
// command, continuation lines joined.
var podIdentityAssociation = regexp.MustCompile(`aws eks create-pod-identity-association((?:[^\n]*\\\n)*[^\n]*)`)

// With EKS Pod Identity the trust policy names only EKS's service and the
// two calls it makes; the association names the ServiceAccount. Every
// association install.md gives names the chart's controller ServiceAccount
// and its namespace.
func TestPodIdentityNamesTheControllerAccount(t *testing.T) {
	ns, sa := controllerAccount(t)
	doc := readIAMDocument(t, podIdentityPath)
	var actions []string
	for _, s := range doc.Statement {
		p, ok := s.Principal.(map[string]any)
		if !ok {
			t.Fatalf("%s: statement %s has principal %v", podIdentityPath, s.Sid, s.Principal)
		}
		if svc, _ := stringList(p["Service"]); !slices.Equal(svc, []string{podIdentityService}) || len(p) != 1 {
			t.Errorf("%s: statement %s trusts %v, want the service %s only", podIdentityPath, s.Sid, p, podIdentityService)
		}
		a, _ := stringList(s.Action)
		actions = append(actions, a...)
	}
	slices.Sort(actions)
	if want := []string{"sts:AssumeRole", "sts:TagSession"}; !slices.Equal(actions, want) {
		t.Errorf("%s allows %v, want %v", podIdentityPath, actions, want)
	}
	commands := podIdentityAssociation.FindAllStringSubmatch(string(readRepoFile(t, installDocPath)), -1)
	if len(commands) == 0 {
		t.Fatal("install.md has no aws eks create-pod-identity-association command")
	}
	for _, c := range commands {
		args := strings.Fields(strings.ReplaceAll(c[1], "\\\n", " "))
		flag := func(name string) string {
			if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
				return args[i+1]
			}
			return ""
		}
		if flag("--namespace") != ns || flag("--service-account") != sa {
			t.Errorf("install.md associates --namespace %q --service-account %q; the chart's controller runs as %s/%s", flag("--namespace"), flag("--service-account"), ns, sa)
		}
	}
}

// kmsActionsParagraph is install.md's paragraph that lists what a
// customer-managed key must allow for EBS encryption.
var kmsActionsParagraph = regexp.MustCompile(`(?s)Volumes encrypted with a customer-managed KMS key also need.*?\n\n`)

// kmsAction is an action alone in backquotes (not a condition such as
// `kms:GrantIsForAWSResource: true`).
var kmsAction = regexp.MustCompile("`(kms:[A-Za-z*]+)`")

// The key-policy example gives the controller's role exactly the KMS
// actions install.md lists for EBS encryption with a customer-managed key,
// only through EC2 in the caller's account, and kms:CreateGrant only for
// grants to an AWS resource (the volume), so the role cannot hand the key
// to anyone else.
func TestKMSKeyPolicyMatchesInstallDoc(t *testing.T) {
	para := kmsActionsParagraph.FindString(string(readRepoFile(t, installDocPath)))
	if para == "" {
		t.Fatal("install.md no longer lists the KMS actions for customer-managed keys")
	}
	var listed []string
	for _, m := range kmsAction.FindAllStringSubmatch(para, -1) {
		if !slices.Contains(listed, m[1]) {
			listed = append(listed, m[1])
		}
	}
	slices.Sort(listed)
	doc := readIAMDocument(t, kmsKeyPolicyPath)
	var allowed []string
	for _, s := range doc.Statement {
		t.Run(s.Sid, func(t *testing.T) {
			actions, _ := stringList(s.Action)
			allowed = append(allowed, actions...)
			if s.Effect != "Allow" {
				t.Errorf("effect %s", s.Effect)
			}
			p, _ := s.Principal.(map[string]any)
			if roles, _ := stringList(p["AWS"]); len(roles) != 1 || !strings.HasSuffix(roles[0], ":role/diskplane") {
				t.Errorf("principal %v, want the controller's role (role/diskplane, as install.md names it)", s.Principal)
			}
			checks := []struct{ op, key, want string }{
				{"StringEquals", "kms:ViaService", "ec2.REGION.amazonaws.com"},
				{"StringEquals", "kms:CallerAccount", "ACCOUNT_ID"},
			}
			if slices.Contains(actions, "kms:CreateGrant") {
				checks = append(checks, struct{ op, key, want string }{"Bool", "kms:GrantIsForAWSResource", "true"})
			}
			for _, c := range checks {
				values, err := conditionValues(s.Condition[c.op][c.key])
				if err != nil || !slices.Equal(values, []string{c.want}) {
					t.Errorf("condition %s %s = %v, want %q", c.op, c.key, values, c.want)
				}
			}
		})
	}
	slices.Sort(allowed)
	if !slices.Equal(allowed, listed) {
		t.Errorf("%s allows %v\ninstall.md lists %v", kmsKeyPolicyPath, allowed, listed)
	}
}
