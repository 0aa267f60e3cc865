package chart

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// ec2Call matches a call of the EC2 client in pkg/cloud: c.ec2.CreateVolume(
// or ec2.NewDescribeVolumesPaginator(.
var ec2Call = regexp.MustCompile(`\.ec2\.([A-Z][A-Za-z]+)\(|ec2\.New([A-Z][A-Za-z]+)Paginator\(`)

// ec2Operations lists the EC2 API operations the controller's cloud layer
// calls, read from pkg/cloud's sources (tests excluded).
func ec2Operations(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "pkg", "cloud", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ec2Call.FindAllStringSubmatch(string(src), -1) {
			ops["ec2:"+m[1]+m[2]] = true
		}
	}
	if len(ops) == 0 {
		t.Fatal("found no EC2 calls in pkg/cloud")
	}
	return slices.Sorted(maps.Keys(ops))
}

// The documented IAM policy allows exactly the EC2 operations the
// controller calls: none missing (the driver would fail with
// UnauthorizedOperation), none extra (least privilege).
func TestIAMPolicyMatchesTheCloudLayer(t *testing.T) {
	calls := ec2Operations(t)
	allowed := policyActionsOf(t, iamPolicyPath)
	for _, a := range allowed {
		if strings.Contains(a, "*") {
			t.Errorf("policy allows a wildcard action %s", a)
		}
	}
	if !slices.Equal(calls, allowed) {
		t.Errorf("pkg/cloud calls %v\ndocs/iam-policy.json allows %v", calls, allowed)
	}
}
