//go:build linux

package mounter_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/pkg/mounter/mountertest"
)

// fastKey is a random 256-bit key, as KMS makes: its header derives with
// PBKDF2 at its minimum, so these tests, which are about what is written
// where and not about the derivation, stay quick under the node VM's
// emulation.
var fastKey = mounter.LUKSKey{Secret: []byte("0123456789abcdef0123456789abcdef"), Random: true}

// openKey opens v's LUKS mapping with key, and closes it when the test ends.
func (r *rig) openKey(v *mountertest.Volume, key mounter.LUKSKey) (string, error) {
	r.t.Helper()
	mapping, err := r.m.OpenEncrypted(context.Background(), v.ID, v.Device, key)
	if err == nil {
		r.t.Cleanup(func() {
			if err := r.m.CloseEncrypted(context.Background(), v.ID); err != nil {
				r.t.Errorf("close the mapping of %s: %v", v.ID, err)
			}
		})
	}
	return mapping, err
}

// luksLabel is the label of a device's LUKS2 header.
func luksLabel(t *testing.T, device string) string {
	t.Helper()
	return strings.TrimSpace(run(t, "blkid", "-p", "-o", "value", "-s", "LABEL", device))
}

// stageAndWrite makes an ext4 filesystem on an open mapping (or mounts the
// one there), writes data to it and unmounts it.
func (r *rig) stageAndWrite(v *mountertest.Volume, mapping string, data []byte) {
	r.t.Helper()
	target := r.mountPoint("stage")
	if err := r.m.FormatAndMount(v.ID, mapping, target, "ext4", nil, nil); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "data"), data, 0o600); err != nil {
		r.t.Fatal(err)
	}
	r.unmount(target)
}

// reopenAndRead closes the volume's mapping, opens it afresh as a reboot
// or a restored snapshot would, mounts it and returns what its file holds.
func (r *rig) reopenAndRead(v *mountertest.Volume) []byte {
	r.t.Helper()
	ctx := context.Background()
	if err := r.m.CloseEncrypted(ctx, v.ID); err != nil {
		r.t.Fatal(err)
	}
	mapping, err := r.openKey(v, fastKey)
	if err != nil {
		r.t.Fatal(err)
	}
	target := r.mountPoint("again")
	if err := r.m.FormatAndMount(v.ID, mapping, target, "ext4", nil, nil); err != nil {
		r.t.Fatal(err)
	}
	defer r.unmount(target)
	b, err := os.ReadFile(filepath.Join(target, "data"))
	if err != nil {
		r.t.Fatalf("after a fresh open the volume has lost its file: %v", err)
	}
	return b
}

// TestLUKSLabelInterrupted is the data-loss case of a stage interrupted
// between preparing a new mapping and labelling its header written (the
// label's cryptsetup fails once, or the plugin dies there): the kubelet's
// retry found the mapping open and reused it with the label still
// unwritten, mkfs ran and the pod wrote; the next fresh open (a reboot, a
// reschedule, a restored snapshot) prepared the mapping again, zeroing the
// filesystem's superblock, and formatted it. Now the retry finishes the
// label, and a fresh open finds the data.
func TestLUKSLabelInterrupted(t *testing.T) {
	r := newLUKSRig(t)
	v := r.volume(64 * mib)
	failOnceWith(t, "cryptsetup", "config", "the label could not be written")
	if _, err := r.m.OpenEncrypted(context.Background(), v.ID, v.Device, fastKey); err == nil {
		t.Fatal("OpenEncrypted succeeded though labelling the header failed")
	}
	if got := luksLabel(t, v.Device); got != "diskplane-unwritten" {
		t.Fatalf("after the failed label the header says %q", got)
	}
	mapping, err := r.openKey(v, fastKey) // the kubelet's retry; the mapping is open
	if err != nil {
		t.Fatal(err)
	}
	if got := luksLabel(t, v.Device); got != "diskplane" {
		t.Fatalf("the retry left the header labelled %q", got)
	}
	r.stageAndWrite(v, mapping, []byte("written after the retry"))
	if got := r.reopenAndRead(v); string(got) != "written after the retry" {
		t.Fatalf("after a fresh open the file holds %q", got)
	}
}

// TestLUKSUnlabelledWrittenMapping starts from the state the earlier code
// left behind: a header still labelled unwritten whose mapping holds a
// filesystem with data (made after a retry that skipped the label). Opened
// again, mounted or not, the mapping is found written: the label is set and
// not a byte of it changes.
func TestLUKSUnlabelledWrittenMapping(t *testing.T) {
	for _, mounted := range []bool{true, false} {
		name := "closed"
		if mounted {
			name = "mounted"
		}
		t.Run(name, func(t *testing.T) {
			r := newLUKSRig(t)
			v := r.volume(64 * mib)
			runStdin(t, fastKey.Secret, "cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2",
				"--pbkdf-force-iterations", "1000", "--label", "diskplane-unwritten", "--key-file", "-", v.Device)
			mapping, err := r.openKey(v, fastKey) // prepares and labels; set the label back below
			if err != nil {
				t.Fatal(err)
			}
			target := r.mountPoint("stage")
			if err := r.m.FormatAndMount(v.ID, mapping, target, "ext4", nil, nil); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(target, "data"), []byte("the pod's data"), 0o600); err != nil {
				t.Fatal(err)
			}
			run(t, "sync")
			run(t, "cryptsetup", "config", "--label", "diskplane-unwritten", v.Device)
			if !mounted {
				r.unmount(target)
				if err := r.m.CloseEncrypted(context.Background(), v.ID); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.m.OpenEncrypted(context.Background(), v.ID, v.Device, fastKey); err != nil {
				t.Fatal(err)
			}
			if got := luksLabel(t, v.Device); got != "diskplane" {
				t.Fatalf("the header is labelled %q, want diskplane", got)
			}
			if mounted {
				r.unmount(target)
			}
			if got := r.reopenAndRead(v); string(got) != "the pod's data" {
				t.Fatalf("after a fresh open the file holds %q", got)
			}
		})
	}
}

// TestLUKSPreparationResumes interrupts the preparation itself: the first
// probe window of a new mapping is zeroed, the last is not (the plugin died
// in between), and the header is still unwritten. The next open writes
// only the blocks nothing wrote, and the mapping reads blank.
func TestLUKSPreparationResumes(t *testing.T) {
	r := newLUKSRig(t)
	v := r.volume(64 * mib)
	runStdin(t, fastKey.Secret, "cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2",
		"--pbkdf-force-iterations", "1000", "--label", "diskplane-unwritten", "--key-file", "-", v.Device)
	name := "diskplane-" + v.ID
	runStdin(t, fastKey.Secret, "cryptsetup", "open", "--key-file", "-", v.Device, name)
	t.Cleanup(func() { _ = exec.Command("cryptsetup", "close", name).Run() })
	mountertest.WriteAt(t, "/dev/mapper/"+name, make([]byte, 1<<20), 0)
	mapping, err := r.openKey(v, fastKey)
	if err != nil {
		t.Fatal(err)
	}
	size, err := r.m.DeviceSize(mapping)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, size - 1<<20} {
		if b := mountertest.ReadAt(t, mapping, 1<<20, off); !bytes.Equal(b, make([]byte, 1<<20)) {
			t.Fatalf("the mapping's MiB at %d is not zeros after the preparation resumed", off)
		}
	}
	if got := luksLabel(t, v.Device); got != "diskplane" {
		t.Fatalf("the header is labelled %q, want diskplane", got)
	}
}

// TestLUKSReusedMappingChecksKey: a stage or expand of a volume whose
// mapping is open must still prove its key opens the header. Before, a
// wrong or rotated node-stage secret succeeded for as long as the mapping
// stayed open, and failed only after the next reboot.
func TestLUKSReusedMappingChecksKey(t *testing.T) {
	r := newLUKSRig(t)
	v := r.volume(64 * mib)
	mapping, err := r.openKey(v, fastKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	other := mounter.LUKSKey{Secret: []byte("fedcba9876543210fedcba9876543210"), Random: true}
	if _, err := r.m.OpenEncrypted(ctx, v.ID, v.Device, other); !errors.Is(err, mounter.ErrWrongPassphrase) {
		t.Fatalf("OpenEncrypted of an open mapping with another key = %v, want ErrWrongPassphrase", err)
	}
	if err := r.m.ResizeEncrypted(ctx, v.ID, other.Secret); !errors.Is(err, mounter.ErrWrongPassphrase) {
		t.Fatalf("ResizeEncrypted with another key and nothing to grow = %v, want ErrWrongPassphrase", err)
	}
	if got, err := r.m.OpenEncrypted(ctx, v.ID, v.Device, fastKey); err != nil || got != mapping {
		t.Fatalf("OpenEncrypted of the open mapping with its key = %q, %v", got, err)
	}
	if err := r.m.ResizeEncrypted(ctx, v.ID, fastKey.Secret); err != nil {
		t.Fatalf("ResizeEncrypted with the key: %v", err)
	}
	if got, _, err := r.m.EncryptedMapping(v.ID); err != nil || got != mapping {
		t.Fatalf("the mapping after the refusals: %q, %v", got, err)
	}
}

// TestLUKSCostlyHeaderRefused: a LUKS2 header written elsewhere whose key
// slot needs more Argon2 memory than the node allows (a tenant's raw block
// volume restored into a luks2 class, say) is refused before any key is
// derived, whichever slot is costly, and the device is untouched. Before,
// cryptsetup ran and the plugin's container was killed for its memory on
// every retry. It needs no device-mapper: nothing is opened. (The bound
// here is 16 MiB, not the default 128, to keep the test quick.)
func TestLUKSCostlyHeaderRefused(t *testing.T) {
	// Small costs keep the formats quick under the node VM's emulation.
	r := newRigWith(t, mounter.Options{LUKSPBKDFMemoryKiB: 8 << 10, LUKSMaxPBKDFMemoryKiB: 16 << 10})
	for _, costly := range []string{"0", "1"} {
		t.Run("slot "+costly, func(t *testing.T) {
			v := r.volume(64 * mib)
			memory := map[string]string{"0": "8192", "1": "8192"}
			memory[costly] = "20480" // over the bound of 16 MiB
			runStdin(t, passphrase, "cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "argon2id",
				"--pbkdf-memory", memory["0"], "--pbkdf-force-iterations", "4", "--key-file", "-", v.Device)
			keys := t.TempDir() // luksAddKey takes the new key from a file
			if err := os.WriteFile(filepath.Join(keys, "new"), wrongPass, 0o600); err != nil {
				t.Fatal(err)
			}
			runStdin(t, passphrase, "cryptsetup", "luksAddKey", "--batch-mode", "--key-file", "-",
				"--pbkdf", "argon2id", "--pbkdf-memory", memory["1"], "--pbkdf-force-iterations", "4", v.Device, filepath.Join(keys, "new"))
			flush(t, v.Device)
			before := checksum(t, v.File)
			_, err := r.m.OpenEncrypted(context.Background(), v.ID, v.Device, mounter.LUKSKey{Secret: passphrase})
			if !errors.Is(err, mounter.ErrLUKSTooCostly) || !strings.Contains(err.Error(), "key slot "+costly) {
				t.Fatalf("OpenEncrypted of a header with a 20 MiB slot %s = %v, want ErrLUKSTooCostly naming it", costly, err)
			}
			if got, _, _ := r.m.EncryptedMapping(v.ID); got != "" {
				t.Fatalf("a refused header left mapping %s", got)
			}
			if after := checksum(t, v.File); after != before {
				t.Fatal("refusing the header changed the device")
			}
		})
	}
}

// TestLUKSWithoutUdev opens, finds, mounts and closes a mapping the way
// the node plugin's container does it, with no udev to serve it (its /run
// is its own): libdevmapper then makes /dev/mapper's entry a device node
// itself, not udev's link to /dev/dm-N, and the mapping must still be
// known by its device numbers. The crash harness found a stage repeated
// over such a mount refused for good.
func TestLUKSWithoutUdev(t *testing.T) {
	r := newLUKSRig(t)
	t.Setenv("DM_DISABLE_UDEV", "1")
	v := r.volume(64 * mib)
	mapping, err := r.openKey(v, fastKey)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat("/dev/mapper/diskplane-" + v.ID); err != nil || fi.Mode()&os.ModeSymlink != 0 {
		t.Fatalf("without udev the mapper entry should be a device node: %v, %v", fi, err)
	}
	if !strings.HasPrefix(mapping, "/dev/dm-") {
		t.Fatalf("mapping %q, want the kernel's /dev/dm-N", mapping)
	}
	if got, under, err := r.m.EncryptedMapping(v.ID); err != nil || got != mapping || under != v.Device {
		t.Fatalf("EncryptedMapping = %q, %q, %v; want %s on %s", got, under, err, mapping, v.Device)
	}
	// mount(8) records the mapping as /dev/mapper/<name>, here a device node
	// of its own: it must still be known for the mapping, or a repeated
	// stage would take the staging path for another device's.
	target := r.mountPoint("mounted")
	if err := r.m.FormatAndMount(v.ID, mapping, target, "ext4", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := r.m.MountedDevice(target); err != nil || got != mapping {
		t.Fatalf("MountedDevice = %q, %v; want %s", got, err, mapping)
	}
	r.unmount(target)
	r.stageAndWrite(v, mapping, []byte("no udev"))
	if got := r.reopenAndRead(v); string(got) != "no udev" {
		t.Fatalf("after a fresh open the file holds %q", got)
	}
}
