package model

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
)

// EC2 resource IDs are a prefix and 17 lower-case hex digits (older resources
// have 8; both are accepted on input).
var (
	volumeIDPattern   = regexp.MustCompile(`^vol-([0-9a-f]{8}|[0-9a-f]{17})$`)
	snapshotIDPattern = regexp.MustCompile(`^snap-([0-9a-f]{8}|[0-9a-f]{17})$`)
	instanceIDPattern = regexp.MustCompile(`^i-([0-9a-f]{8}|[0-9a-f]{17})$`)
)

// newID returns prefix-<17 random hex digits>.
func newID(prefix string) string {
	var b [9]byte
	// crypto/rand.Read never fails (it panics on an unusable system source).
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])[:17]
}

// checkVolumeID rejects an ID that cannot be a volume ID, with EC2's code.
func checkVolumeID(id string) *Error {
	if !volumeIDPattern.MatchString(id) {
		return Errorf(CodeInvalidVolumeIDMalformed, "Invalid id: %q (expecting \"vol-...\")", id)
	}
	return nil
}

// checkSnapshotID rejects an ID that cannot be a snapshot ID.
func checkSnapshotID(id string) *Error {
	if !snapshotIDPattern.MatchString(id) {
		return Errorf(CodeInvalidSnapshotIDMalformed, "Invalid id: %q (expecting \"snap-...\")", id)
	}
	return nil
}

// checkInstanceID rejects an ID that cannot be an instance ID.
func checkInstanceID(id string) *Error {
	if !instanceIDPattern.MatchString(id) {
		return Errorf(CodeInvalidInstanceIDMalformed, "Invalid id: %q", id)
	}
	return nil
}

// ValidInstanceID reports whether id has the form of an instance ID, for
// configuration checks.
func ValidInstanceID(id string) bool { return instanceIDPattern.MatchString(id) }

// volumeNotFound is EC2's answer for unknown volume IDs.
func volumeNotFound(ids ...string) *Error {
	if len(ids) == 1 {
		return Errorf(CodeInvalidVolumeNotFound, "The volume '%s' does not exist.", ids[0])
	}
	return Errorf(CodeInvalidVolumeNotFound, "The volumes '%s' do not exist.", strings.Join(ids, ", "))
}

// snapshotNotFound is EC2's answer for unknown snapshot IDs.
func snapshotNotFound(ids ...string) *Error {
	if len(ids) == 1 {
		return Errorf(CodeInvalidSnapshotNotFound, "The snapshot '%s' does not exist.", ids[0])
	}
	return Errorf(CodeInvalidSnapshotNotFound, "The snapshots '%s' do not exist.", strings.Join(ids, ", "))
}

// instanceNotFound is EC2's answer for unknown instance IDs.
func instanceNotFound(ids ...string) *Error {
	if len(ids) == 1 {
		return Errorf(CodeInvalidInstanceIDNotFound, "The instance ID '%s' does not exist", ids[0])
	}
	return Errorf(CodeInvalidInstanceIDNotFound, "The instance IDs '%s' do not exist", strings.Join(ids, ", "))
}
