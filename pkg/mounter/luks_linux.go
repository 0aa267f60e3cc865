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

// LUKS2 header labels that tell whether the volume's mapping was prepared.
// A header is formatted as unwritten; its mapping is prepared (zeros
// written where the blank test reads and nothing has written yet:
// prepareMapping), and only then is the label set to written. Every open
// of a header still labelled unwritten finishes the preparation, so a stage
// interrupted between the format and the label is completed by the next
// one, instead of leaving a mapping of random bytes that no blank test
// accepts; the label only spares later opens the reading.
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
	status, stdout, stderr, err := m.runCryptsetup(ctx, passphrase, args...)
	return status, strings.TrimSpace(stdout + stderr), err
}

// runCryptsetup is cryptsetup with its standard output and standard error
// apart, for the commands whose output is read (luksDump's JSON).
func (m *linuxMounter) runCryptsetup(ctx context.Context, passphrase []byte, args ...string) (status int, stdout, stderr string, err error) {
	if err := os.MkdirAll(cryptsetupLockDir, 0o700); err != nil {
		klog.V(4).InfoS("Cannot make cryptsetup's lock directory; it runs without locks", "dir", cryptsetupLockDir, "err", err)
	}
	cmd := m.exec.CommandContext(ctx, "cryptsetup", args...)
	if passphrase != nil {
		cmd.SetStdin(bytes.NewReader(passphrase))
	}
	var out, errOut bytes.Buffer
	cmd.SetStdout(&out)
	cmd.SetStderr(&errOut)
	err = cmd.Run()
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errOut.String(), nil
	case errors.As(err, &exit):
		return exit.ExitStatus(), out.String(), errOut.String(), err
	case errors.Is(err, utilexec.ErrExecutableNotFound):
		return -1, out.String(), errOut.String(), fmt.Errorf("%w: cryptsetup is not installed", ErrEncryptionUnavailable)
	default:
		return -1, out.String(), errOut.String(), err
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
	if mapping != "" && under != device {
		return "", fmt.Errorf("%w: the open LUKS mapping %s of volume %s sits on %s, not on the volume's device %s; "+
			"it is stale (close it with cryptsetup close %s once nothing uses it)", ErrWrongDevice, mappingName(volumeID), volumeID, under, device, mappingName(volumeID))
	}
	found, err := probe(m.exec, device)
	if err != nil {
		return "", err
	}
	switch {
	case found.Filesystem == "crypto_LUKS":
	case mapping == "" && found.Blank():
		if found, err = m.luksFormat(ctx, volumeID, device, key); err != nil {
			return "", err
		}
	case mapping != "":
		return "", fmt.Errorf("%w: volume %s's LUKS mapping is open on %s, which now holds %s, not a LUKS header; "+
			"nothing was written (close the mapping with cryptsetup close %s once nothing uses it)", ErrFilesystemMismatch, volumeID, device, found, mappingName(volumeID))
	default:
		return "", fmt.Errorf("%w: %s holds %s, not a LUKS header; refusing to encrypt or open it", ErrFilesystemMismatch, device, found)
	}
	header, err := m.readLUKSHeader(ctx, volumeID, device, found.Version)
	if err != nil {
		return "", err
	}
	if err := header.checkCost(volumeID, m.luks.maxMemoryKiB); err != nil {
		return "", err
	}
	if mapping == "" {
		if mapping, err = m.luksOpen(ctx, volumeID, device, passphrase); err != nil {
			return "", err
		}
	} else if err := m.checkKeyAndGrow(ctx, volumeID, mapping, device, passphrase); err != nil {
		return "", err
	}
	if found.Label == luksLabelUnwritten {
		if err := m.finishPreparation(ctx, volumeID, device, mapping, header.DataOffset); err != nil {
			return "", err
		}
	}
	return mapping, nil
}

// luksOpen opens the volume's mapping with passphrase and returns its
// device node. A new mapping spans its device.
func (m *linuxMounter) luksOpen(ctx context.Context, volumeID, device string, passphrase []byte) (string, error) {
	status, out, err := m.cryptsetup(ctx, passphrase, "open", "--type", "luks", "--allow-discards", "--key-file", "-", device, mappingName(volumeID))
	switch {
	case status == cryptsetupNoPermission:
		return "", fmt.Errorf("%w: volume %s (%s)", ErrWrongPassphrase, volumeID, device)
	case err != nil:
		return "", cryptsetupError(fmt.Sprintf("open the LUKS volume %s (%s)", volumeID, device), out, err)
	}
	mapping, _, err := m.EncryptedMapping(volumeID)
	if err != nil || mapping == "" {
		return "", fmt.Errorf("the LUKS mapping of volume %s did not appear after opening it: %v", volumeID, err)
	}
	klog.V(2).InfoS("Opened LUKS volume", "volumeID", volumeID, "device", device, "mapping", mapping)
	return mapping, nil
}

// checkKeyAndGrow checks that passphrase opens a key slot of the header
// under a mapping that was open already, so that a wrong or rotated secret
// fails now, not at the next reboot; a mapping whose device grew is grown
// with it, which checks the passphrase too.
func (m *linuxMounter) checkKeyAndGrow(ctx context.Context, volumeID, mapping, device string, passphrase []byte) error {
	short, err := m.mappingShort(ctx, volumeID, mapping, device)
	if err != nil {
		return err
	}
	if short {
		return m.growMapping(ctx, volumeID, mapping, device, passphrase)
	}
	status, out, err := m.cryptsetup(ctx, passphrase, "open", "--test-passphrase", "--type", "luks", "--key-file", "-", device)
	switch {
	case status == cryptsetupNoPermission:
		return fmt.Errorf("%w: volume %s (%s), whose mapping is open", ErrWrongPassphrase, volumeID, device)
	case err != nil:
		return cryptsetupError(fmt.Sprintf("check the passphrase of the LUKS volume %s (%s)", volumeID, device), out, err)
	}
	klog.V(4).InfoS("Reusing the open LUKS mapping; the passphrase opens its header", "volumeID", volumeID, "mapping", mapping, "device", device)
	return nil
}

// luksFormat writes a LUKS2 header, labelled unwritten, on a blank device,
// and returns what the device then holds. It probes again right before, as
// format does before mkfs, and also reads where the mapping's first probe
// window will lie (the data offset), which the blank test does not: what a
// later blank test reads through the mapping must be what nothing ever
// wrote (see finishPreparation).
func (m *linuxMounter) luksFormat(ctx context.Context, volumeID, device string, key LUKSKey) (deviceContent, error) {
	found, err := probe(m.exec, device)
	if err != nil {
		return deviceContent{}, err
	}
	if !found.Blank() {
		return deviceContent{}, fmt.Errorf("%w: %s holds %s on a second look, though it was blank on the first; refusing to format it", ErrFilesystemMismatch, device, found)
	}
	zeros, err := windowIsZero(device, luksDataOffset)
	if err != nil {
		return deviceContent{}, fmt.Errorf("read %s where its LUKS2 data will begin: %w", device, err)
	}
	if !zeros {
		return deviceContent{}, fmt.Errorf("%w: %s reads as blank at both ends but holds data at %d MiB, where its LUKS2 data would begin; refusing to format it",
			ErrFilesystemMismatch, device, luksDataOffset>>20)
	}
	args := []string{"luksFormat", "--batch-mode", "--type", "luks2", "--cipher", luksCipher, "--key-size", luksKeyBits,
		"--offset", strconv.Itoa(luksDataOffsetSectors)}
	if key.Random {
		args = append(args, "--pbkdf", "pbkdf2", "--hash", "sha256", "--pbkdf-force-iterations", strconv.Itoa(minPBKDF2Iterations))
	} else {
		args = append(args, "--pbkdf", luksPBKDF, "--pbkdf-memory", strconv.Itoa(m.luks.memoryKiB))
		if m.luks.iterations > 0 {
			args = append(args, "--pbkdf-force-iterations", strconv.Itoa(m.luks.iterations))
		} else {
			args = append(args, "--iter-time", strconv.FormatInt(m.luks.time.Milliseconds(), 10))
		}
	}
	args = append(args, "--label", luksLabelUnwritten, "--key-file", "-", device)
	klog.V(2).InfoS("Formatting blank device as LUKS2", "volumeID", volumeID, "device", device, "randomKey", key.Random, "pbkdfMemoryKiB", m.luks.memoryKiB)
	if _, out, err := m.cryptsetup(ctx, key.Secret, args...); err != nil {
		return deviceContent{}, cryptsetupError(fmt.Sprintf("format volume %s (%s) as LUKS2", volumeID, device), out, err)
	}
	return deviceContent{Filesystem: "crypto_LUKS", Version: "2", Label: luksLabelUnwritten}, nil
}

// finishPreparation completes a header labelled unwritten: its mapping is
// prepared (prepareMapping) and the header labelled written. It runs
// whenever the label says unwritten, whether the mapping was opened just
// now or found open, so a stage interrupted anywhere between luksFormat and
// the label is finished by the next one — and since preparation writes
// only where nothing was ever written, finishing it over a mapping that
// has since been written (a filesystem made before the label was set)
// changes no byte of it.
func (m *linuxMounter) finishPreparation(ctx context.Context, volumeID, device, mapping string, dataOffset int64) error {
	if dataOffset <= 0 {
		return fmt.Errorf("volume %s's LUKS header is labelled %s but gives no data offset; refusing to prepare its mapping", volumeID, luksLabelUnwritten)
	}
	if err := prepareMapping(device, mapping, dataOffset); err != nil {
		return fmt.Errorf("prepare the new LUKS mapping of volume %s: %w", volumeID, err)
	}
	if _, out, err := m.cryptsetup(ctx, nil, "config", "--label", luksLabelWritten, device); err != nil {
		return cryptsetupError(fmt.Sprintf("label the LUKS header of volume %s", volumeID), out, err)
	}
	klog.V(4).InfoS("Prepared the new LUKS mapping", "volumeID", volumeID, "mapping", mapping)
	return nil
}

// EncryptedMapping finds the mapping by the device numbers of its
// /dev/mapper entry, not by where a symlink points: where no udev serves
// the plugin's container (its /run is its own), libdevmapper makes that
// entry a device node itself, and only udev makes it a link to /dev/dm-N.
// Either way the kernel's own node, /dev/dm-N, is what is returned.
func (m *linuxMounter) EncryptedMapping(volumeID string) (string, string, error) {
	entry := filepath.Join("/dev/mapper", mappingName(volumeID))
	major, minor, err := m.devices.statBlock(entry)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("find the LUKS mapping of volume %s: %s: %w", volumeID, entry, err)
	}
	sysPath, err := filepath.EvalSymlinks(filepath.Join(m.devices.sysDir, "dev", "block", fmt.Sprintf("%d:%d", major, minor)))
	if err != nil {
		return "", "", fmt.Errorf("the LUKS mapping %s of volume %s has no sysfs entry (%d:%d): %w", entry, volumeID, major, minor, err)
	}
	mapping := filepath.Join(m.devices.devDir, filepath.Base(sysPath))
	slaves, err := os.ReadDir(filepath.Join(sysPath, "slaves"))
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
	if len(passphrase) > 0 {
		found, err := probe(m.exec, device)
		if err != nil {
			return err
		}
		if found.Filesystem != "crypto_LUKS" {
			return fmt.Errorf("%w: volume %s's LUKS mapping is open on %s, which now holds %s, not a LUKS header", ErrFilesystemMismatch, volumeID, device, found)
		}
		header, err := m.readLUKSHeader(ctx, volumeID, device, found.Version)
		if err != nil {
			return err
		}
		if err := header.checkCost(volumeID, m.luks.maxMemoryKiB); err != nil {
			return err
		}
		return m.checkKeyAndGrow(ctx, volumeID, mapping, device, passphrase)
	}
	need, err := m.mappingShort(ctx, volumeID, mapping, device)
	if err != nil || !need {
		return err
	}
	return fmt.Errorf("%w: volume %s's device %s grew and its mapping must follow", ErrPassphraseNeeded, volumeID, device)
}

// growMapping grows a mapping to its device, with the passphrase: the
// volume key of an open LUKS2 mapping is in the kernel's keyring, out of
// cryptsetup's reach from another process.
func (m *linuxMounter) growMapping(ctx context.Context, volumeID, mapping, device string, passphrase []byte) error {
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
