package disks

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/guestagent"
)

// guestStore keeps volumes and snapshots as image files, exactly as the loop
// store does, but attaches volumes to an instance that is a virtual machine
// with a kernel of its own: the VM sees the data directory through a shared
// folder, and its guest agent exposes each attached volume's image as an
// NVMe device with EBS's serial number and model (see package guestagent).
// The node plugin in the VM then finds, verifies, formats, mounts, grows and
// encrypts volumes exactly as on a Nitro instance.
type guestStore struct {
	Store        // the image files
	agent        guestagent.Exposer
	guestDataDir string
}

// agentWait bounds how long NewGuestStore waits for the guest agent to
// answer: the VM may still be booting when the emulator starts.
const agentWait = 2 * time.Minute

// NewGuestStore returns the store of an emulator that plays a VM instance.
// Images live in dataDir as with NewLoopStore; guestDataDir is where the VM
// sees dataDir (its mount of the shared folder); agent is the VM's guest
// agent. It waits for the agent to answer, up to two minutes.
func NewGuestStore(dataDir, guestDataDir string, agent guestagent.Exposer) (Store, error) {
	if !filepath.IsAbs(guestDataDir) {
		return nil, fmt.Errorf("guest data directory %q: want an absolute path in the guest", guestDataDir)
	}
	// The image files need no host links: the loop store is given a link
	// directory of its own that nothing reads.
	files, err := NewLoopStore(dataDir, filepath.Join(dataDir, "unused-links"))
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(agentWait)
	for {
		_, err := agent.List()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the guest agent did not answer within %s: %w", agentWait, err)
		}
		klog.V(2).InfoS("Waiting for the guest agent", "err", err)
		time.Sleep(time.Second)
	}
	klog.V(2).InfoS("Guest disk store ready", "dataDir", dataDir, "guestDataDir", guestDataDir)
	return &guestStore{Store: files, agent: agent, guestDataDir: guestDataDir}, nil
}

// guestImage is where the guest sees a volume's image.
func (s *guestStore) guestImage(volumeID string) string {
	return filepath.Join(s.guestDataDir, volumesSubdir, volumeID+imageSuffix)
}

// Attach exposes the volume in the guest and returns its device there.
func (s *guestStore) Attach(volumeID string) (string, error) {
	if err := validateVolumeID(volumeID); err != nil {
		return "", err
	}
	d, err := s.agent.Attach(volumeID, s.guestImage(volumeID))
	if err != nil {
		return "", fmt.Errorf("attach volume %s to the guest: %w", volumeID, err)
	}
	return d.Device, nil
}

// Detach removes the volume's device from the guest; ErrBusy while the
// guest has it mounted or open, unless force is set.
func (s *guestStore) Detach(volumeID string, force bool) error {
	if err := validateVolumeID(volumeID); err != nil {
		return err
	}
	err := s.agent.Detach(volumeID, force)
	if errors.Is(err, guestagent.ErrBusy) {
		return fmt.Errorf("%w: %w", ErrBusy, err)
	}
	return err
}

// ResizeVolume grows the image and, when the volume is attached, makes the
// guest's device show the new size, so a mounted filesystem can be grown
// online.
func (s *guestStore) ResizeVolume(volumeID string, sizeBytes int64) error {
	if err := s.Store.ResizeVolume(volumeID, sizeBytes); err != nil {
		return err
	}
	if err := s.agent.Resize(volumeID); err != nil && !errors.Is(err, guestagent.ErrNotAttached) {
		return fmt.Errorf("resize volume %s in the guest: %w", volumeID, err)
	}
	return nil
}

// Reconcile makes the guest match the model after a restart of either: the
// volumes in attachedVolumeIDs are exposed (again), any other the agent
// exposes is removed, forcibly, since the model says it is not attached. It
// carries on past errors and returns them all.
func (s *guestStore) Reconcile(attachedVolumeIDs []string) error {
	exposed, err := s.agent.List()
	if err != nil {
		return fmt.Errorf("list the guest's volumes: %w", err)
	}
	want := map[string]bool{}
	for _, id := range attachedVolumeIDs {
		want[id] = true
	}
	var errs []error
	for _, d := range exposed {
		if want[d.VolumeID] {
			continue
		}
		if err := s.agent.Detach(d.VolumeID, true); err != nil {
			errs = append(errs, fmt.Errorf("reconcile volume %s: %w", d.VolumeID, err))
			continue
		}
		klog.V(2).InfoS("Removed the guest device of a volume that is not attached", "volumeID", d.VolumeID)
	}
	for _, id := range attachedVolumeIDs {
		if _, err := s.Attach(id); err != nil {
			errs = append(errs, fmt.Errorf("reconcile volume %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}
