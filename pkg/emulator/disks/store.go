// Package disks holds the bytes behind the EC2 emulator's volumes and
// snapshots. Every volume is a sparse file named after its volume ID; when a
// volume is attached to the instance this host is, the store backs it with a
// loop device and creates the by-id link a Nitro instance would have, so the
// node plugin's real discovery, mkfs, mount and resize run against a real
// kernel.
package disks

import "errors"

// ErrBusy means a device is still mounted or held open, so it cannot be
// detached yet. The emulator keeps such an attachment in "detaching", as EC2
// does with a busy device, and tries again until it is free or the detach is
// forced.
var ErrBusy = errors.New("device is busy")

// ErrNotFound means the store holds no volume or snapshot with that ID.
var ErrNotFound = errors.New("no such volume or snapshot in the disk store")

// Store is what the emulator's cloud model asks of the disk backend. All
// methods are idempotent (creating what exists, deleting what is gone,
// attaching what is attached all succeed) because the model calls them again
// after a crash or restart. Sizes are in bytes.
type Store interface {
	// CreateVolume makes an empty sparse volume of the given size.
	CreateVolume(volumeID string, sizeBytes int64) error
	// CreateVolumeFromSnapshot makes a volume holding the snapshot's bytes,
	// grown to sizeBytes when that is larger than the snapshot.
	CreateVolumeFromSnapshot(volumeID, snapshotID string, sizeBytes int64) error
	// CloneVolume makes a volume holding a copy of another volume's bytes,
	// grown to sizeBytes when that is larger than the source.
	CloneVolume(volumeID, sourceVolumeID string, sizeBytes int64) error
	// ResizeVolume grows a volume; if it is attached, the loop device's
	// capacity grows too so a mounted filesystem can be grown online.
	ResizeVolume(volumeID string, sizeBytes int64) error
	// DeleteVolume removes a detached volume's bytes.
	DeleteVolume(volumeID string) error
	// CreateSnapshot copies a volume's current bytes (sparsely; reflink when
	// the filesystem supports it) into a snapshot.
	CreateSnapshot(snapshotID, volumeID string) error
	// DeleteSnapshot removes a snapshot's bytes.
	DeleteSnapshot(snapshotID string) error
	// Attach exposes a volume on this host: a loop device over its file and a
	// by-id link named after the volume. It returns the loop device path.
	Attach(volumeID string) (devicePath string, err error)
	// Detach removes the by-id link and the loop device. It returns ErrBusy
	// while the device is mounted or held open, unless force is set.
	Detach(volumeID string, force bool) error
	// Reconcile is called once at start-up with the volumes the model says are
	// attached to this host: it re-creates missing loop devices and links for
	// them and removes the ones the store made for any other volume.
	Reconcile(attachedVolumeIDs []string) error
	// UnknownImages lists, sorted, the volume and snapshot IDs whose images
	// the store holds although knownIDs does not name them. A crash after
	// the store made an image and before the model saved the state naming it
	// leaves such an image, and the client's retry makes a new ID, so nothing
	// would ever use or remove it. The model lists them at start-up to warn
	// about them when it cannot tell leftovers from someone else's data.
	UnknownImages(knownIDs []string) ([]string, error)
	// RemoveUnknownImages removes the images UnknownImages lists and returns
	// the IDs it removed, sorted, so that a crash costs no disk space for
	// good. dataDir is the directory whose saved state knownIDs come from:
	// that state is the authority only over images in that directory, so a
	// store whose images live elsewhere fails and removes nothing. An image
	// a loop device still uses (a lazily detached, still mounted device) is
	// kept and logged until a later call finds it free. It is meant for
	// start-up, after Reconcile, when the model is the store's only user; it
	// carries on past errors and returns them with what it did remove.
	RemoveUnknownImages(dataDir string, knownIDs []string) (removed []string, err error)
}
