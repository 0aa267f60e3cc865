package disks

import (
	"fmt"
	"regexp"
	"strings"
)

// DefaultLinkDir is where a Nitro instance's udev rules put the by-id links
// of attached EBS volumes, and so where the loop store puts its links unless
// told otherwise.
const DefaultLinkDir = "/dev/disk/by-id"

// linkPrefix starts the by-id name of every EBS volume on a Nitro instance:
// the NVMe model string, then the serial, which is the volume ID without its
// dash.
const linkPrefix = "nvme-Amazon_Elastic_Block_Store_"

// sectorSize is the granularity of every size: a loop device (like an EBS
// volume) exposes whole 512-byte sectors.
const sectorSize = 512

var (
	// volumeIDPattern and snapshotIDPattern accept the shape of EC2 IDs and
	// nothing that could escape the data directory. The emulator's model
	// enforces EC2's exact ID rules; the store only guards its paths.
	volumeIDPattern   = regexp.MustCompile(`^vol-[0-9a-zA-Z]+$`)
	snapshotIDPattern = regexp.MustCompile(`^snap-[0-9a-zA-Z]+$`)
)

// LinkName is the by-id link name a Nitro instance gives an attached volume:
// nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0 for
// vol-0123456789abcdef0. The node plugin looks the volume up by this name.
func LinkName(volumeID string) string {
	return linkPrefix + strings.Replace(volumeID, "-", "", 1)
}

// validateVolumeID rejects IDs that are not volume IDs.
func validateVolumeID(id string) error {
	if !volumeIDPattern.MatchString(id) {
		return fmt.Errorf("invalid volume ID %q", id)
	}
	return nil
}

// validateSnapshotID rejects IDs that are not snapshot IDs.
func validateSnapshotID(id string) error {
	if !snapshotIDPattern.MatchString(id) {
		return fmt.Errorf("invalid snapshot ID %q", id)
	}
	return nil
}

// knownImageIDs is the set of volume and snapshot IDs a caller says it
// knows. One malformed ID fails the whole set: a caller that passes one has
// a bug, and deciding which images are unknown from its list could remove
// one it does know.
func knownImageIDs(ids []string) (map[string]bool, error) {
	known := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !volumeIDPattern.MatchString(id) && !snapshotIDPattern.MatchString(id) {
			return nil, fmt.Errorf("invalid volume or snapshot ID %q", id)
		}
		known[id] = true
	}
	return known, nil
}

// validateSize rejects sizes a block device cannot have.
func validateSize(sizeBytes int64) error {
	if sizeBytes <= 0 || sizeBytes%sectorSize != 0 {
		return fmt.Errorf("invalid size %d bytes: want a positive multiple of %d", sizeBytes, sectorSize)
	}
	return nil
}
