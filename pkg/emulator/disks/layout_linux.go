package disks

import (
	"path/filepath"
	"strings"
)

// imageSuffix ends every volume and snapshot image file name.
const imageSuffix = ".img"

// The store's file layout under its data directory.
const (
	volumesSubdir   = "volumes"
	snapshotsSubdir = "snapshots"
)

// deletedSuffix is what the kernel appends to the backing file of a loop
// device whose file was removed.
const deletedSuffix = " (deleted)"

// tempPrefix starts the name of every file the store writes before renaming
// it into place; leftovers of a crash are removed at start-up.
const tempPrefix = ".tmp-"

// volumeIDFromLinkName is LinkName's inverse; ok is false for names that are
// not an EBS volume's link.
func volumeIDFromLinkName(name string) (string, bool) {
	serial, ok := strings.CutPrefix(name, linkPrefix)
	if !ok {
		return "", false
	}
	id, ok := strings.CutPrefix(serial, "vol")
	if !ok {
		return "", false
	}
	id = "vol-" + id
	return id, volumeIDPattern.MatchString(id)
}

// layout names the files of a store rooted at one data directory.
type layout struct {
	volumesDir   string
	snapshotsDir string
}

func newLayout(dataDir string) layout {
	return layout{
		volumesDir:   filepath.Join(dataDir, volumesSubdir),
		snapshotsDir: filepath.Join(dataDir, snapshotsSubdir),
	}
}

// volumePath is the image file of a volume. Its base name carries the volume
// ID because the node plugin verifies a loop device by its backing file.
func (l layout) volumePath(volumeID string) string {
	return filepath.Join(l.volumesDir, volumeID+imageSuffix)
}

// snapshotPath is the image file of a snapshot.
func (l layout) snapshotPath(snapshotID string) string {
	return filepath.Join(l.snapshotsDir, snapshotID+imageSuffix)
}

// volumeIDFromPath returns the volume whose image is path, or ok=false when
// path is not a volume image of this layout. A deletedSuffix is accepted: a
// loop device whose image was removed still belongs to the store.
func (l layout) volumeIDFromPath(path string) (string, bool) {
	path = strings.TrimSuffix(path, deletedSuffix)
	if filepath.Dir(path) != l.volumesDir {
		return "", false
	}
	id, ok := strings.CutSuffix(filepath.Base(path), imageSuffix)
	if !ok || validateVolumeID(id) != nil {
		return "", false
	}
	return id, true
}
