// Package guestagent connects the EC2 emulator to an instance that is a
// virtual machine with a kernel of its own (hack/vm): the emulator, on the
// host, decides what is attached to the instance; an agent inside the VM
// makes each attached volume appear there the way EBS volumes appear on a
// Nitro instance, as an NVMe namespace whose controller serial number is the
// volume ID without its dash and whose model is "Amazon Elastic Block
// Store", and makes it disappear on detach.
//
// The package holds the contract and its transport only: the Exposer
// interface (implemented in the guest by the disk store's NVMe target), an
// HTTP handler serving an Exposer, and the client the emulator's disk store
// calls. Paths in requests are paths inside the guest.
package guestagent

import (
	"errors"
	"fmt"
	"regexp"
)

// ErrBusy means the volume's device is mounted or held open in the guest, so
// it cannot be detached without force. The emulator keeps such an attachment
// detaching, as EC2 does.
var ErrBusy = errors.New("device is busy")

// ErrNotAttached means the agent exposes no device for the volume.
var ErrNotAttached = errors.New("volume is not attached")

// Disk is a volume the agent exposes.
type Disk struct {
	// VolumeID is the EC2 volume ID, vol-….
	VolumeID string `json:"volumeId"`
	// Device is the guest's device node of the volume, e.g. /dev/nvme1n1.
	// The guest's kernel picks it, so it says nothing about the attachment
	// order and differs from the device name EC2 reports.
	Device string `json:"device"`
}

// Exposer is the guest's side: it makes volume images appear as devices.
// Every method is idempotent, so the emulator may repeat any call after a
// crash or a lost answer.
type Exposer interface {
	// Attach exposes the image file at image (a path in the guest) as the
	// volume's device and returns it; a volume exposed already returns its
	// device.
	Attach(volumeID, image string) (Disk, error)
	// Detach removes the volume's device. Without force it fails with
	// ErrBusy, changing nothing, while the device is mounted or held open;
	// with force it removes it anyway (I/O on it then fails, as after a
	// forced detach on EC2). A volume not exposed is detached.
	Detach(volumeID string, force bool) error
	// Resize makes the volume's device show the image's current size (the
	// emulator grows the image first). It fails with ErrNotAttached when the
	// volume is not exposed.
	Resize(volumeID string) error
	// List returns the exposed volumes, sorted by volume ID.
	List() ([]Disk, error)
}

// volumeIDPattern is the form of an EC2 volume ID.
var volumeIDPattern = regexp.MustCompile(`^vol-([0-9a-f]{8}|[0-9a-f]{17})$`)

// ValidateVolumeID refuses anything that is not an EC2 volume ID, before it
// reaches a configfs or device path.
func ValidateVolumeID(id string) error {
	if !volumeIDPattern.MatchString(id) {
		return fmt.Errorf("%q is not a volume ID (vol- and 8 or 17 hex digits)", id)
	}
	return nil
}
