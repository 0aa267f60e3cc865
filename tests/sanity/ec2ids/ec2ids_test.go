package ec2ids

import (
	"regexp"
	"strings"
	"testing"
)

// ec2LongID is EC2's long resource ID: a prefix and 17 lower-case hex digits.
var ec2LongID = regexp.MustCompile(`^(vol|i)-[0-9a-f]{17}$`)

func TestEC2IDs(t *testing.T) {
	ids := Generator{}
	tests := []struct {
		name       string
		generate   func() string
		prefix     string
		wellFormed bool
		unique     bool
	}{
		{"valid volume ID", ids.GenerateUniqueValidVolumeID, "vol-", true, true},
		{"invalid volume ID", ids.GenerateInvalidVolumeID, "vol-", false, false},
		{"valid node ID", ids.GenerateUniqueValidNodeID, "i-", true, true},
		{"invalid node ID", ids.GenerateInvalidNodeID, "i-", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			first, second := tc.generate(), tc.generate()
			if !strings.HasPrefix(first, tc.prefix) {
				t.Errorf("%q does not start with %q", first, tc.prefix)
			}
			if got := ec2LongID.MatchString(first); got != tc.wellFormed {
				t.Errorf("%q well-formed = %v, want %v", first, got, tc.wellFormed)
			}
			if tc.unique && first == second {
				t.Errorf("two calls returned the same ID %q", first)
			}
		})
	}
}
