package node

import (
	"context"
	"fmt"

	"github.com/diskplane/diskplane/pkg/mounter"
)

// luksHeaderBytes is what the fake's LUKS header takes off a device: a
// mapping is this much smaller than its device, as with LUKS2's 16 MiB.
const luksHeaderBytes = 16 << 20

// fakeMapping is the device node of a volume's mapping in the fake.
func fakeMapping(volumeID string) string { return "/dev/mapper/diskplane-" + volumeID }

func (f *fakeOS) OpenEncrypted(ctx context.Context, volumeID, device string, key mounter.LUKSKey) (string, error) {
	passphrase := key.Secret
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["OpenEncrypted"]; err != nil {
		return "", err
	}
	mapping := fakeMapping(volumeID)
	if under, open := f.mappings[volumeID]; open {
		if under != device {
			return "", fmt.Errorf("%w: the mapping sits on %s", mounter.ErrWrongDevice, under)
		}
		if f.luksKeys[device] != string(passphrase) {
			return "", fmt.Errorf("%w: %s, whose mapping is open", mounter.ErrWrongPassphrase, device)
		}
		if f.deviceSizes[mapping]+luksHeaderBytes < f.deviceSizes[under] {
			f.record("cryptsetup resize %s", mapping)
			f.deviceSizes[mapping] = f.deviceSizes[under] - luksHeaderBytes
		}
		return mapping, nil
	}
	switch f.formats[device] {
	case "":
		if key.Random {
			f.record("luksFormat random-key %s", device)
		} else {
			f.record("luksFormat %s", device)
		}
		f.formats[device] = "crypto_LUKS"
		f.luksKeys[device] = string(passphrase)
	case "crypto_LUKS":
	default:
		return "", fmt.Errorf("%w: %s holds %s", mounter.ErrFilesystemMismatch, device, f.formats[device])
	}
	if f.luksKeys[device] != string(passphrase) {
		return "", fmt.Errorf("%w: %s", mounter.ErrWrongPassphrase, device)
	}
	f.record("luksOpen %s %s", device, mapping)
	f.mappings[volumeID] = device
	if _, known := f.formats[mapping]; !known {
		f.formats[mapping] = ""
	}
	f.deviceSizes[mapping] = f.deviceSizes[device] - luksHeaderBytes
	return mapping, nil
}

func (f *fakeOS) EncryptedMapping(volumeID string) (string, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	under, open := f.mappings[volumeID]
	if !open {
		return "", "", f.failOn["EncryptedMapping"]
	}
	return fakeMapping(volumeID), under, f.failOn["EncryptedMapping"]
}

func (f *fakeOS) ResizeEncrypted(ctx context.Context, volumeID string, passphrase []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	under, open := f.mappings[volumeID]
	if !open {
		return fmt.Errorf("volume %s has no open mapping", volumeID)
	}
	mapping := fakeMapping(volumeID)
	if len(passphrase) > 0 && f.luksKeys[under] != string(passphrase) {
		return fmt.Errorf("%w: %s", mounter.ErrWrongPassphrase, under)
	}
	if f.deviceSizes[mapping]+luksHeaderBytes >= f.deviceSizes[under] {
		return nil
	}
	if len(passphrase) == 0 {
		return fmt.Errorf("%w: %s grew", mounter.ErrPassphraseNeeded, under)
	}
	f.record("cryptsetup resize %s", mapping)
	f.deviceSizes[mapping] = f.deviceSizes[under] - luksHeaderBytes
	return nil
}

func (f *fakeOS) CloseEncrypted(ctx context.Context, volumeID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["CloseEncrypted"]; err != nil {
		return err
	}
	mapping := fakeMapping(volumeID)
	for p, m := range f.mounts {
		if m.source == mapping {
			return fmt.Errorf("the mapping of %s is busy: mounted at %s", volumeID, p)
		}
	}
	if _, open := f.mappings[volumeID]; open {
		f.record("luksClose %s", mapping)
		delete(f.mappings, volumeID)
	}
	return nil
}
