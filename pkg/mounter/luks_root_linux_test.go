//go:build linux

package mounter_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/pkg/mounter/mountertest"
	"github.com/diskplane/diskplane/pkg/testutil"
)

const gib = 1 << 30

var (
	passphrase = []byte("correct horse battery staple")
	wrongPass  = []byte("incorrect horse")
)

// newLUKSRig is newRig on a kernel with device-mapper (the node VM: make
// test-vm), with cryptsetup.
func newLUKSRig(t *testing.T) *rig {
	t.Helper()
	return requireLUKS(t, newRig(t))
}

// requireLUKS skips the test, loudly, unless r's kernel can open LUKS.
func requireLUKS(t *testing.T, r *rig) *rig {
	t.Helper()
	testutil.RequireRoot(t, "cryptsetup")
	testutil.RequireKernelFeature(t, testutil.HasDeviceMapper(), "opening LUKS volumes needs device-mapper (dm-crypt), which this kernel lacks")
	return r
}

// open opens v's LUKS mapping, and closes it when the test ends.
func (r *rig) open(v *mountertest.Volume, pass []byte) (string, error) {
	r.t.Helper()
	mapping, err := r.m.OpenEncrypted(context.Background(), v.ID, v.Device, mounter.LUKSKey{Secret: pass})
	if err == nil {
		r.t.Cleanup(func() {
			if err := r.m.CloseEncrypted(context.Background(), v.ID); err != nil {
				r.t.Errorf("close the mapping of %s: %v", v.ID, err)
			}
		})
	}
	return mapping, err
}

// TestLUKSLifecycle formats a blank volume as LUKS2, makes a filesystem on
// the mapping, writes, closes, opens again and finds the data; the header
// is EBS-ready: AES-XTS, Argon2id, labelled written. Its derivation is
// tuned to a time, as a node's is by default (50 ms, to keep it quick).
func TestLUKSLifecycle(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs"} {
		t.Run(fsType, func(t *testing.T) {
			r := requireLUKS(t, newRigWith(t, mounter.Options{LUKSPBKDFTime: 50 * time.Millisecond}))
			v := r.volume(320 * mib) // LUKS2 and xfs need 300 MB at least
			mapping, err := r.open(v, passphrase)
			if err != nil {
				t.Fatal(err)
			}
			dump := run(t, "cryptsetup", "luksDump", v.Device)
			for _, want := range []string{"Version:       \t2", "aes-xts-plain64", "argon2id", "Label:          \tdiskplane\n"} {
				if !strings.Contains(strings.ReplaceAll(dump, " ", ""), strings.ReplaceAll(want, " ", "")) {
					t.Errorf("luksDump lacks %q:\n%s", want, dump)
				}
			}
			if got, under, err := r.m.EncryptedMapping(v.ID); err != nil || got != mapping || under != v.Device {
				t.Fatalf("EncryptedMapping = %q, %q, %v; want %s on %s", got, under, err, mapping, v.Device)
			}
			if err := r.m.VerifyDevice(v.ID, mapping); err != nil {
				t.Fatalf("VerifyDevice of the volume's mapping: %v", err)
			}
			if err := r.m.VerifyDevice(mountertest.NewVolumeID(t), mapping); !errors.Is(err, mounter.ErrWrongDevice) {
				t.Fatalf("VerifyDevice of another volume's mapping = %v, want ErrWrongDevice", err)
			}
			target := r.mountPoint("stage")
			if err := r.m.FormatAndMount(v.ID, mapping, target, fsType, nil, nil); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(target, "data"), []byte("keep me"), 0o600); err != nil {
				t.Fatal(err)
			}
			r.unmount(target)
			if err := r.m.CloseEncrypted(context.Background(), v.ID); err != nil {
				t.Fatal(err)
			}
			if err := r.m.CloseEncrypted(context.Background(), v.ID); err != nil {
				t.Fatalf("closing a closed mapping: %v", err)
			}
			if got, _, err := r.m.EncryptedMapping(v.ID); err != nil || got != "" {
				t.Fatalf("EncryptedMapping after close = %q, %v", got, err)
			}
			if raw := run(t, "blkid", "-p", "-o", "value", "-s", "TYPE", v.Device); strings.TrimSpace(raw) != "crypto_LUKS" {
				t.Fatalf("the device holds %q, want crypto_LUKS", raw)
			}
			if mapping, err = r.m.OpenEncrypted(context.Background(), v.ID, v.Device, mounter.LUKSKey{Secret: passphrase}); err != nil {
				t.Fatal(err)
			}
			if err := r.m.FormatAndMount(v.ID, mapping, target, fsType, nil, nil); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(target, "data")); err != nil || string(b) != "keep me" {
				t.Fatalf("data after reopening = %q, %v", b, err)
			}
			r.unmount(target)
		})
	}
}

// TestLUKSRandomKey formats with a random 256-bit key (one KMS made): the
// key slot derives with PBKDF2 at cryptsetup's minimum, so opening takes
// milliseconds, and the key opens it again; a short key is refused.
func TestLUKSRandomKey(t *testing.T) {
	r := newLUKSRig(t)
	v := r.volume(64 * mib)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	key[0] = '\n' // binary keys, newlines included, reach cryptsetup whole
	if _, err := r.m.OpenEncrypted(context.Background(), v.ID, v.Device, mounter.LUKSKey{Secret: key[:16], Random: true}); err == nil {
		t.Fatal("a 128-bit random key was taken without a costly derivation")
	}
	if _, err := r.open(v, nil); err == nil {
		t.Fatal("an empty key was taken")
	}
	if _, err := r.m.OpenEncrypted(context.Background(), v.ID, v.Device, mounter.LUKSKey{Secret: key, Random: true}); err != nil {
		t.Fatal(err)
	}
	dump := strings.ReplaceAll(run(t, "cryptsetup", "luksDump", v.Device), " ", "")
	for _, want := range []string{"PBKDF:pbkdf2", "Iterations:1000", "aes-xts-plain64", "Label:\tdiskplane\n"} {
		if !strings.Contains(dump, want) {
			t.Errorf("luksDump lacks %q:\n%s", want, dump)
		}
	}
	if err := r.m.CloseEncrypted(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	// The kernel may give the new mapping another dm-N than the first had.
	again, err := r.m.OpenEncrypted(context.Background(), v.ID, v.Device, mounter.LUKSKey{Secret: key, Random: true})
	if got, _, _ := r.m.EncryptedMapping(v.ID); err != nil || again == "" || got != again {
		t.Fatalf("reopening with the key: %q (the volume's mapping: %q), %v", again, got, err)
	}
	t.Logf("opened with the random key in %s", time.Since(started))
	if err := r.m.CloseEncrypted(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	other := make([]byte, 32)
	if _, err := r.m.OpenEncrypted(context.Background(), v.ID, v.Device, mounter.LUKSKey{Secret: other, Random: true}); !errors.Is(err, mounter.ErrWrongPassphrase) {
		t.Fatalf("another key: %v", err)
	}
}

// TestLUKSRefusals checks that nothing is written to a device whose LUKS
// header the passphrase does not open, or that holds something else.
func TestLUKSRefusals(t *testing.T) {
	r := newLUKSRig(t)
	v := r.volume(64 * mib)
	if _, err := r.open(v, passphrase); err != nil {
		t.Fatal(err)
	}
	if err := r.m.CloseEncrypted(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	flush(t, v.Device)
	before := checksum(t, v.File)
	if _, err := r.m.OpenEncrypted(context.Background(), v.ID, v.Device, mounter.LUKSKey{Secret: wrongPass}); !errors.Is(err, mounter.ErrWrongPassphrase) {
		t.Fatalf("OpenEncrypted with a wrong passphrase = %v, want ErrWrongPassphrase", err)
	}
	if got, _, _ := r.m.EncryptedMapping(v.ID); got != "" {
		t.Fatalf("a wrong passphrase left mapping %s", got)
	}
	if after := checksum(t, v.File); after != before {
		t.Fatal("a wrong passphrase changed the device")
	}

	plain := r.volume(64 * mib)
	run(t, "mkfs.ext4", "-q", plain.Device)
	flush(t, plain.Device)
	before = checksum(t, plain.File)
	if _, err := r.m.OpenEncrypted(context.Background(), plain.ID, plain.Device, mounter.LUKSKey{Secret: passphrase}); !errors.Is(err, mounter.ErrFilesystemMismatch) {
		t.Fatalf("OpenEncrypted of an ext4 device = %v, want ErrFilesystemMismatch", err)
	}
	if after := checksum(t, plain.File); after != before {
		t.Fatal("OpenEncrypted changed a device holding a filesystem")
	}
}

// TestLUKSStaleMappingRefused opens a mapping under one volume's name on
// another volume's device, as a mapping left from an earlier attachment
// would be: it must never be used for the volume.
func TestLUKSStaleMappingRefused(t *testing.T) {
	r := newLUKSRig(t)
	a, b := r.volume(64*mib), r.volume(64*mib)
	if _, err := r.open(b, passphrase); err != nil {
		t.Fatal(err)
	}
	if err := r.m.CloseEncrypted(context.Background(), b.ID); err != nil {
		t.Fatal(err)
	}
	stale := "diskplane-" + a.ID
	runStdin(t, passphrase, "cryptsetup", "open", "--key-file", "-", b.Device, stale)
	t.Cleanup(func() { _ = exec.Command("cryptsetup", "close", stale).Run() })
	if _, err := r.m.OpenEncrypted(context.Background(), a.ID, a.Device, mounter.LUKSKey{Secret: passphrase}); !errors.Is(err, mounter.ErrWrongDevice) {
		t.Fatalf("OpenEncrypted over a stale mapping = %v, want ErrWrongDevice", err)
	}
}

// TestLUKSFormatInterrupted picks up a volume whose header was written but
// whose mapping was never prepared (a crash right after luksFormat): the
// unwritten label lets the next open finish the job.
func TestLUKSFormatInterrupted(t *testing.T) {
	r := newLUKSRig(t)
	v := r.volume(64 * mib)
	runStdin(t, passphrase, "cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2",
		"--pbkdf-force-iterations", "1000", "--label", "diskplane-unwritten", "--key-file", "-", v.Device)
	mapping, err := r.open(v, passphrase)
	if err != nil {
		t.Fatal(err)
	}
	target := r.mountPoint("stage")
	if err := r.m.FormatAndMount(v.ID, mapping, target, "ext4", nil, nil); err != nil {
		t.Fatalf("FormatAndMount of the finished mapping: %v", err)
	}
	r.unmount(target)
	if label := strings.TrimSpace(run(t, "blkid", "-p", "-o", "value", "-s", "LABEL", v.Device)); label != "diskplane" {
		t.Fatalf("header label %q, want diskplane", label)
	}
}

// TestLUKSGrowOnline grows a mounted encrypted volume: the mapping needs
// the passphrase, then the filesystem grows on it.
func TestLUKSGrowOnline(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs"} {
		t.Run(fsType, func(t *testing.T) {
			r := newLUKSRig(t)
			if fsType == "ext4" {
				mountertest.RequireExt4OnlineResize(t)
			}
			v := r.volume(gib)
			mapping, err := r.open(v, passphrase)
			if err != nil {
				t.Fatal(err)
			}
			target := r.mountPoint("stage")
			if err := r.m.FormatAndMount(v.ID, mapping, target, fsType, nil, nil); err != nil {
				t.Fatal(err)
			}
			defer r.unmount(target)
			if err := r.m.ResizeEncrypted(context.Background(), v.ID, nil); err != nil {
				t.Fatalf("ResizeEncrypted of a mapping that spans its device: %v", err)
			}
			v.Grow(t, 2*gib)
			if err := r.m.ResizeEncrypted(context.Background(), v.ID, nil); !errors.Is(err, mounter.ErrPassphraseNeeded) {
				t.Fatalf("ResizeEncrypted without the passphrase = %v, want ErrPassphraseNeeded", err)
			}
			if err := r.m.ResizeEncrypted(context.Background(), v.ID, wrongPass); !errors.Is(err, mounter.ErrWrongPassphrase) {
				t.Fatalf("ResizeEncrypted with a wrong passphrase = %v, want ErrWrongPassphrase", err)
			}
			if err := r.m.ResizeEncrypted(context.Background(), v.ID, passphrase); err != nil {
				t.Fatal(err)
			}
			size, err := r.m.DeviceSize(mapping)
			if err != nil || size < 2*gib-32*mib {
				t.Fatalf("mapping is %d bytes (%v) after growing the device to 2 GiB", size, err)
			}
			if need, err := r.m.NeedResize(mapping, target); err != nil || !need {
				t.Fatalf("NeedResize = %v, %v; want true", need, err)
			}
			if err := r.m.Resize(mapping, target); err != nil {
				t.Fatal(err)
			}
			if st, err := r.m.FilesystemStats(target); err != nil || st.TotalBytes < gib+gib/2 {
				t.Fatalf("filesystem %d bytes (%v) after growing", st.TotalBytes, err)
			}
		})
	}
}

// runStdin runs a command with in on its standard input and fails the test
// when it fails.
func runStdin(t *testing.T, in []byte, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(string(in))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

// TestLUKSWithoutDeviceMapper checks the error a node whose kernel has no
// device-mapper gives: it names the cause, and what it wrote (a LUKS2
// header on a blank device) is opened, not formatted again, next time.
func TestLUKSWithoutDeviceMapper(t *testing.T) {
	r := newRig(t)
	testutil.RequireRoot(t, "cryptsetup")
	if testutil.HasDeviceMapper() {
		t.Skip("this kernel has device-mapper; the test is of one without")
	}
	v := r.volume(64 * mib)
	for range 2 {
		_, err := r.m.OpenEncrypted(context.Background(), v.ID, v.Device, mounter.LUKSKey{Secret: passphrase})
		if !errors.Is(err, mounter.ErrEncryptionUnavailable) || !strings.Contains(err.Error(), "device-mapper") {
			t.Fatalf("OpenEncrypted = %v, want ErrEncryptionUnavailable naming device-mapper", err)
		}
	}
	if typ := strings.TrimSpace(run(t, "blkid", "-p", "-o", "value", "-s", "TYPE", v.Device)); typ != "crypto_LUKS" {
		t.Fatalf("the device holds %q, want the LUKS2 header written before the open failed", typ)
	}
}

// TestLUKSFixedIterations: with LUKSPBKDFIterations a passphrase's header
// derives with Argon2id at exactly that many passes and the given memory,
// not a cost tuned on this node, and opens again with the passphrase.
func TestLUKSFixedIterations(t *testing.T) {
	r := requireLUKS(t, newRigWith(t, mounter.Options{LUKSPBKDFMemoryKiB: 8 << 10, LUKSPBKDFIterations: 4}))
	v := r.volume(64 * mib)
	if _, err := r.open(v, passphrase); err != nil {
		t.Fatal(err)
	}
	dump := strings.ReplaceAll(run(t, "cryptsetup", "luksDump", v.Device), " ", "")
	for _, want := range []string{"PBKDF:argon2id", "Timecost:4\n", "Memory:8192\n"} {
		if !strings.Contains(dump, want) {
			t.Errorf("luksDump lacks %q:\n%s", want, dump)
		}
	}
}
