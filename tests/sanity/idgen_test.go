package sanity

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
)

// ec2IDs generates the IDs csi-sanity uses for volumes and nodes that do not
// exist. The defaults ("fake-vol-id-…") are not EC2 IDs, and Diskplane's
// node service refuses such a volume ID as malformed (InvalidArgument: the
// ID names a device link, so nothing else is let near the filesystem),
// where the specs that use a "valid" ID expect NotFound. These IDs have
// EC2's form (vol-, i- and 17 hex digits) and are random, so they name
// nothing; the controller then learns from EC2 that they do not exist.
type ec2IDs struct{}

var _ sanity.IDGenerator = ec2IDs{}

// GenerateUniqueValidVolumeID returns a well-formed volume ID that names no volume.
func (ec2IDs) GenerateUniqueValidVolumeID() string { return randomID("vol") }

// GenerateInvalidVolumeID returns an ID that cannot be an EC2 volume ID.
// csi-sanity uses it only for DeleteVolume, where the spec wants success for
// a volume that does not exist: keeping it malformed checks that the
// controller answers so even when EC2 calls the ID malformed.
func (ec2IDs) GenerateInvalidVolumeID() string { return "vol-not-an-ebs-volume" }

// GenerateUniqueValidNodeID returns a well-formed instance ID that names no instance.
func (ec2IDs) GenerateUniqueValidNodeID() string { return randomID("i") }

// GenerateInvalidNodeID returns an ID that cannot be an EC2 instance ID.
func (ec2IDs) GenerateInvalidNodeID() string { return "i-not-an-ec2-instance" }

// randomID is prefix, a dash and 17 random lower-case hex digits, as EC2's
// long resource IDs are.
func randomID(prefix string) string {
	b := make([]byte, 9)
	_, _ = rand.Read(b) // crypto/rand.Read never fails; it panics on an unusable source
	return prefix + "-" + hex.EncodeToString(b)[:17]
}

// ec2LongID is EC2's long resource ID: a prefix and 17 lower-case hex digits.
var ec2LongID = regexp.MustCompile(`^(vol|i)-[0-9a-f]{17}$`)

func TestEC2IDs(t *testing.T) {
	ids := ec2IDs{}
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
