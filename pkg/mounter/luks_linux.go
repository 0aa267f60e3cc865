//go:build linux

package mounter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"
)

// The LUKS2 format Diskplane writes: AES-XTS with a 512-bit key (two AES-256
// keys), Argon2id to derive the key slot's key from the passphrase.
const (
	luksCipher  = "aes-xts-plain64"
	luksKeyBits = "512"
	luksPBKDF   = "argon2id"
)

// LUKS2 header labels that tell whether the volume's mapping was ever
// written. A header is formatted as unwritten; its mapping is zeroed where
// the blank test reads, and only then is the label set to written, so a
// crash between the format and the zeroing is completed by the next stage
// instead of leaving a mapping of random bytes that no blank test accepts.
const (
	luksLabelUnwritten = "diskplane-unwritten"
	luksLabelWritten   = "diskplane"
)

// A random key (LUKSKey.Random) of at least this many bytes gets PBKDF2
// with cryptsetup's smallest iteration count.
const (
	minRandomKeyBytes   = 32
	minPBKDF2Iterations = 1000
)

// mappingPrefix starts the device-mapper name of every mapping the node
// opens; the volume ID ends it, so the name says which volume it is.
const mappingPrefix = "diskplane-"

// cryptsetup's exit statuses (cryptsetup(8), RETURN CODES).
const (
	cryptsetupNoPermission = 2 // a wrong passphrase
	cryptsetupNotActive    = 4 // no such active mapping
)

// mappingName is the device-mapper name of a volume's LUKS mapping.
func mappingName(volumeID string) string { return mappingPrefix + volumeID }

// cryptsetupLockDir is where cryptsetup keeps its locks. Packages make it
// at boot (tmpfiles.d); in the node plugin's container /run is an empty
// scratch directory, so the plugin makes it itself.
const cryptsetupLockDir = "/run/cryptsetup"

// cryptsetup runs cryptsetup with args, the passphrase (when not nil) on its
// standard input, bounded by ctx. It returns the exit status (-1 when it did
// not run) and what it printed.
func (m *linuxMounter) cryptsetup(ctx context.Context, passphrase []byte, args ...string) (int, string, error) {
	if err := os.MkdirAll(cryptsetupLockDir, 0o700); err != nil {
		klog.V(4).InfoS("Cannot make cryptsetup's lock directory; it runs without locks", "dir", cryptsetupLockDir, "err", err)
	}
	cmd := m.exec.CommandContext(ctx, "cryptsetup", args...)
	if passphrase != nil {
		cmd.SetStdin(bytes.NewReader(passphrase))
	}
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return 0, text, nil
	case errors.As(err, &exit):
		return exit.ExitStatus(), text, err
	case errors.Is(err, utilexec.ErrExecutableNotFound):
		return -1, text, fmt.Errorf("%w: cryptsetup is not installed", ErrEncryptionUnavailable)
	default:
		return -1, text, err
	}
}

// cryptsetupError says what a failed cryptsetup run means, turning the
// kernel's missing device-mapper into ErrEncryptionUnavailable.
func cryptsetupError(what string, out string, err error) error {
	if strings.Contains(out, "Cannot initialize device-mapper") || strings.Contains(out, "dm_mod kernel module") {
		return fmt.Errorf("%w: %s: the kernel has no device-mapper (dm-crypt); cryptsetup said: %s", ErrEncryptionUnavailable, what, out)
	}
	return fmt.Errorf("%s: %w: %s", what, err, out)
}

func (m *linuxMounter) OpenEncrypted(ctx context.Context, volumeID, device string, key LUKSKey) (string, error) {
	passphrase := key.Secret
	if len(passphrase) == 0 {
		return "", errors.New("an empty passphrase opens nothing")
	}
	if key.Random && len(passphrase) < minRandomKeyBytes {
		return "", fmt.Errorf("a random key of %d bytes is too short to go without a costly derivation (%d or more)", len(passphrase), minRandomKeyBytes)
	}
	mapping, under, err := m.EncryptedMapping(volumeID)
	if err != nil {
		return "", err
	}
	if mapping != "" {
		if under != device {
			return "", fmt.Errorf("%w: the open LUKS mapping %s of volume %s sits on %s, not on the volume's device %s; "+
				"it is stale (close it with cryptsetup close %s once nothing uses it)", ErrWrongDevice, mappingName(volumeID), volumeID, under, device, mappingName(volumeID))
		}
		klog.V(4).InfoS("Reusing the open LUKS mapping", "volumeID", volumeID, "mapping", mapping, "device", device)
		return mapping, nil
	}
	found, err := probe(m.exec, device)
	if err != nil {
		return "", err
	}
	switch {
	case found.Blank():
		if err := m.luksFormat(ctx, volumeID, device, key); err != nil {
			return "", err
		}
		found.Label = luksLabelUnwritten
	case found.Filesystem == "crypto_LUKS":
	default:
		return "", fmt.Errorf("%w: %s holds %s, not a LUKS header; refusing to encrypt or open it", ErrFilesystemMismatch, device, found)
	}
	status, out, err := m.cryptsetup(ctx, passphrase, "open", "--type", "luks", "--allow-discards", "--key-file", "-", device, mappingName(volumeID))
	switch {
	case status == cryptsetupNoPermission:
		return "", fmt.Errorf("%w: volume %s (%s)", ErrWrongPassphrase, volumeID, device)
	case err != nil:
		return "", cryptsetupError(fmt.Sprintf("open the LUKS volume %s (%s)", volumeID, device), out, err)
	}
	if mapping, _, err = m.EncryptedMapping(volumeID); err != nil || mapping == "" {
		return "", fmt.Errorf("the LUKS mapping of volume %s did not appear after opening it: %v", volumeID, err)
	}
	klog.V(2).InfoS("Opened LUKS volume", "volumeID", volumeID, "device", device, "mapping", mapping)
	if found.Label == luksLabelUnwritten {
		if err := m.markWritten(ctx, volumeID, device, mapping); err != nil {
			return "", err
		}
	}
	return mapping, nil
}

// luksFormat writes a LUKS2 header, labelled unwritten, on a blank device.
// It probes again right before, as format does before mkfs.
func (m *linuxMounter) luksFormat(ctx context.Context, volumeID, device string, key LUKSKey) error {
	found, err := probe(m.exec, device)
	if err != nil {
		return err
	}
	if !found.Blank() {
		return fmt.Errorf("%w: %s holds %s on a second look, though it was blank on the first; refusing to format it", ErrFilesystemMismatch, device, found)
	}
	args := []string{"luksFormat", "--batch-mode", "--type", "luks2", "--cipher", luksCipher, "--key-size", luksKeyBits}
	if key.Random {
		args = append(args, "--pbkdf", "pbkdf2", "--hash", "sha256", "--pbkdf-force-iterations", strconv.Itoa(minPBKDF2Iterations))
	} else {
		args = append(args, "--pbkdf", luksPBKDF, "--pbkdf-memory", strconv.Itoa(m.luks.memoryKiB), "--iter-time", strconv.FormatInt(m.luks.time.Milliseconds(), 10))
	}
	args = append(args, "--label", luksLabelUnwritten, "--key-file", "-", device)
	klog.V(2).InfoS("Formatting blank device as LUKS2", "volumeID", volumeID, "device", device, "randomKey", key.Random, "pbkdfMemoryKiB", m.luks.memoryKiB)
	if _, out, err := m.cryptsetup(ctx, key.Secret, args...); err != nil {
		return cryptsetupError(fmt.Sprintf("format volume %s (%s) as LUKS2", volumeID, device), out, err)
	}
	return nil
}

// markWritten zeroes a new mapping's first and last MiB, where the blank
// test reads (a new mapping decrypts the device's zeros to random bytes),
// and then labels the header written. Done again after a crash, it zeroes
// what nothing has written yet: the label changes only after the zeroing.
func (m *linuxMounter) markWritten(ctx context.Context, volumeID, device, mapping string) error {
	if err := zeroEnds(mapping); err != nil {
		return fmt.Errorf("prepare the new LUKS mapping of volume %s: %w", volumeID, err)
	}
	if _, out, err := m.cryptsetup(ctx, nil, "config", "--label", luksLabelWritten, device); err != nil {
		return cryptsetupError(fmt.Sprintf("label the LUKS header of volume %s", volumeID), out, err)
	}
	return nil
}

// zeroEnds writes zeros over the first and last probeWindow bytes of a
// device and flushes them.
func zeroEnds(device string) error {
	f, err := os.OpenFile(device, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := f.Seek(0, 2)
	if err != nil {
		return err
	}
	zeros := make([]byte, min(size, probeWindow))
	for _, off := range []int64{0, max(0, size-int64(len(zeros)))} {
		if _, err := f.WriteAt(zeros, off); err != nil {
			return fmt.Errorf("write zeros at %d: %w", off, err)
		}
	}
	return f.Sync()
}

func (m *linuxMounter) EncryptedMapping(volumeID string) (string, string, error) {
	mapping, err := filepath.EvalSymlinks(filepath.Join("/dev/mapper", mappingName(volumeID)))
	if errors.Is(err, os.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("find the LUKS mapping of volume %s: %w", volumeID, err)
	}
	slaves, err := os.ReadDir(filepath.Join(m.devices.sysDir, "block", filepath.Base(mapping), "slaves"))
	if err != nil || len(slaves) != 1 {
		return "", "", fmt.Errorf("the LUKS mapping %s of volume %s does not sit on exactly one device (%v)", mapping, volumeID, err)
	}
	return mapping, filepath.Join(m.devices.devDir, slaves[0].Name()), nil
}

func (m *linuxMounter) ResizeEncrypted(ctx context.Context, volumeID string, passphrase []byte) error {
	mapping, device, err := m.EncryptedMapping(volumeID)
	if err != nil {
		return err
	}
	if mapping == "" {
		return fmt.Errorf("volume %s has no open LUKS mapping to grow", volumeID)
	}
	need, err := m.mappingShort(ctx, volumeID, mapping, device)
	if err != nil || !need {
		return err
	}
	if len(passphrase) == 0 {
		return fmt.Errorf("%w: volume %s's device %s grew and its mapping must follow", ErrPassphraseNeeded, volumeID, device)
	}
	status, out, err := m.cryptsetup(ctx, passphrase, "resize", "--key-file", "-", mappingName(volumeID))
	switch {
	case status == cryptsetupNoPermission:
		return fmt.Errorf("%w: volume %s (%s)", ErrWrongPassphrase, volumeID, device)
	case err != nil:
		return cryptsetupError(fmt.Sprintf("grow the LUKS mapping of volume %s", volumeID), out, err)
	}
	klog.V(2).InfoS("Grew LUKS mapping", "volumeID", volumeID, "mapping", mapping, "device", device)
	return nil
}

// mappingShort reports whether a mapping ends before its device does:
// the mapping's size plus its data offset (cryptsetup status, in sectors)
// is less than the device's size.
func (m *linuxMounter) mappingShort(ctx context.Context, volumeID, mapping, device string) (bool, error) {
	_, out, err := m.cryptsetup(ctx, nil, "status", mappingName(volumeID))
	if err != nil {
		return false, cryptsetupError(fmt.Sprintf("read the LUKS mapping of volume %s", volumeID), out, err)
	}
	offset, size, ok := statusSectors(out)
	if !ok {
		return false, fmt.Errorf("cryptsetup status %s gave no offset and size: %s", mappingName(volumeID), out)
	}
	deviceBytes, err := m.DeviceSize(device)
	if err != nil {
		return false, err
	}
	return (offset+size)*512 < deviceBytes, nil
}

// statusSectors reads the data offset and the size, in 512-byte sectors,
// from cryptsetup status.
func statusSectors(out string) (offset, size int64, ok bool) {
	var haveOffset, haveSize bool
	for _, line := range strings.Split(out, "\n") {
		key, value, found := strings.Cut(strings.TrimSpace(line), ":")
		fields := strings.Fields(value)
		if !found || len(fields) < 2 || fields[1] != "sectors" {
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		switch key {
		case "offset":
			offset, haveOffset = n, true
		case "size":
			size, haveSize = n, true
		}
	}
	return offset, size, haveOffset && haveSize
}

func (m *linuxMounter) CloseEncrypted(ctx context.Context, volumeID string) error {
	status, out, err := m.cryptsetup(ctx, nil, "close", mappingName(volumeID))
	switch {
	case status == cryptsetupNotActive:
		return nil
	case err != nil:
		return cryptsetupError(fmt.Sprintf("close the LUKS mapping of volume %s", volumeID), out, err)
	}
	klog.V(2).InfoS("Closed LUKS volume", "volumeID", volumeID)
	return nil
}
