package disks

import "errors"

// ErrIOFaultsUnsupported means the filesystem holding the images lets a
// write through to an immutable file that was open before, so marking an
// image immutable cannot fail its device's writes (tmpfs and XFS do; ext4
// refuses such writes).
var ErrIOFaultsUnsupported = errors.New("the data directory's filesystem does not refuse writes to an immutable image " +
	"through an open file (ext4 does; tmpfs and XFS do not), so a device's I/O cannot be failed there")

// IOFaulter is a Store that can make the device of an attached volume fail
// its writes with I/O errors, as a disk whose storage has gone bad does,
// while the volume stays attached and whatever is mounted on it stays
// mounted: the node's health checks then see what a real kernel makes of
// I/O errors. A fault ends when the volume is detached (the next attachment
// is a new, healthy device) or when asked to.
type IOFaulter interface {
	// FailIO makes the attached device of volumeID fail every write (fail)
	// or serve writes again (!fail). A volume with no device on this host
	// is ErrNotFound.
	FailIO(volumeID string, fail bool) error
}
