package disks

import "errors"

// stateOnlyStore backs --no-devices: it keeps no bytes, no files and no
// loop devices, so it needs no privileges and any number of volumes costs
// nothing. It keeps no state of its own either — the emulator's model is the
// only record of which volumes and snapshots exist — so it survives restarts
// trivially and never answers ErrNotFound or ErrBusy. It still rejects
// malformed IDs and sizes, as the loop store does, so a model bug shows up in
// unprivileged runs too.
type stateOnlyStore struct{}

// NewStateOnlyStore returns the store for --no-devices runs: every call
// validates its arguments and succeeds without touching the machine. Attach
// returns an empty device path, because no device exists.
func NewStateOnlyStore() Store { return stateOnlyStore{} }

func (stateOnlyStore) CreateVolume(volumeID string, sizeBytes int64) error {
	return errors.Join(validateVolumeID(volumeID), validateSize(sizeBytes))
}

func (stateOnlyStore) CreateVolumeFromSnapshot(volumeID, snapshotID string, sizeBytes int64) error {
	return errors.Join(validateVolumeID(volumeID), validateSnapshotID(snapshotID), validateSize(sizeBytes))
}

func (stateOnlyStore) CloneVolume(volumeID, sourceVolumeID string, sizeBytes int64) error {
	return errors.Join(validateVolumeID(volumeID), validateVolumeID(sourceVolumeID), validateSize(sizeBytes))
}

func (stateOnlyStore) ResizeVolume(volumeID string, sizeBytes int64) error {
	return errors.Join(validateVolumeID(volumeID), validateSize(sizeBytes))
}

func (stateOnlyStore) DeleteVolume(volumeID string) error { return validateVolumeID(volumeID) }

func (stateOnlyStore) CreateSnapshot(snapshotID, volumeID string) error {
	return errors.Join(validateSnapshotID(snapshotID), validateVolumeID(volumeID))
}

func (stateOnlyStore) DeleteSnapshot(snapshotID string) error { return validateSnapshotID(snapshotID) }

func (stateOnlyStore) Attach(volumeID string) (string, error) {
	return "", validateVolumeID(volumeID)
}

func (stateOnlyStore) Detach(volumeID string, _ bool) error { return validateVolumeID(volumeID) }

func (stateOnlyStore) Reconcile(attachedVolumeIDs []string) error {
	var errs []error
	for _, id := range attachedVolumeIDs {
		errs = append(errs, validateVolumeID(id))
	}
	return errors.Join(errs...)
}

func (stateOnlyStore) UnknownImages(knownIDs []string) ([]string, error) {
	_, err := knownImageIDs(knownIDs)
	return nil, err
}

func (stateOnlyStore) RemoveUnknownImages(_ string, knownIDs []string) ([]string, error) {
	_, err := knownImageIDs(knownIDs)
	return nil, err
}
