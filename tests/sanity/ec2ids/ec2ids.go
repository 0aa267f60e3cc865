// Package ec2ids generates the IDs csi-sanity uses for volumes and nodes
// that do not exist, in EC2's form, for every csi-sanity run against
// Diskplane (tests/sanity on Linux, tests/windows for the Windows node).
package ec2ids

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
)

// Generator generates the IDs csi-sanity uses for volumes and nodes that do not
// exist. The defaults ("fake-vol-id-…") are not EC2 IDs, and Diskplane's
// node service refuses such a volume ID as malformed (InvalidArgument: the
// ID names a device link, so nothing else is let near the filesystem),
// where the specs that use a "valid" ID expect NotFound. These IDs have
// EC2's form (vol-, i- and 17 hex digits) and are random, so they name
// nothing; the controller then learns from EC2 that they do not exist.
type Generator struct{}

var _ sanity.IDGenerator = Generator{}

// GenerateUniqueValidVolumeID returns a well-formed volume ID that names no volume.
func (Generator) GenerateUniqueValidVolumeID() string { return randomID("vol") }

// GenerateInvalidVolumeID returns an ID that cannot be an EC2 volume ID.
// csi-sanity uses it only for DeleteVolume, where the spec wants success for
// a volume that does not exist: keeping it malformed checks that the
// controller answers so even when EC2 calls the ID malformed.
func (Generator) GenerateInvalidVolumeID() string { return "vol-not-an-ebs-volume" }

// GenerateUniqueValidNodeID returns a well-formed instance ID that names no instance.
func (Generator) GenerateUniqueValidNodeID() string { return randomID("i") }

// GenerateInvalidNodeID returns an ID that cannot be an EC2 instance ID.
func (Generator) GenerateInvalidNodeID() string { return "i-not-an-ec2-instance" }

// randomID is prefix, a dash and 17 random lower-case hex digits, as EC2's
// long resource IDs are.
func randomID(prefix string) string {
	b := make([]byte, 9)
	_, _ = rand.Read(b) // crypto/rand.Read never fails; it panics on an unusable source
	return prefix + "-" + hex.EncodeToString(b)[:17]
}
