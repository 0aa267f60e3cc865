//go:build linux

package node_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/driver/node"
	"github.com/diskplane/diskplane/pkg/mounter"
)

// stageFigure is one row of make bench's P5 for encrypted volumes, in the
// JSON form tests/bench's EncryptedStage reads from p5-luks.json (this
// package does not import the tests).
type stageFigure struct {
	FsType string        `json:"fsType"`
	Stage  time.Duration `json:"stage"`
	ByHand time.Duration `json:"byHand"`
}

// TestStageEncryptedFigures records make bench's P5 figures for encrypted
// volumes: NodeStageVolume of a blank 100 GiB volume with LUKS2 as a
// production node writes it (Argon2id bounded to 32 MiB, cryptsetup's own
// 2 s iteration time) against the same work by hand on another blank
// volume of that size: cryptsetup luksFormat with the node's parameters,
// open, mkfs and mount. Opening LUKS needs device-mapper, so make bench
// runs it in the node VM (hack/bench/run.sh sets DISKPLANE_BENCH_DIR,
// where it writes p5-luks.json); without that variable it does not run.
func TestStageEncryptedFigures(t *testing.T) {
	out := os.Getenv("DISKPLANE_BENCH_DIR")
	if out == "" {
		t.Skip("records make bench's P5 figures for LUKS2: hack/bench/run.sh runs it in the node VM with DISKPLANE_BENCH_DIR set")
	}
	n := newCloudNode(t)
	requireLUKS(t)
	n.svc = n.newService(func(c *node.Config) {
		m, err := mounter.New(mounter.Options{DeviceLinkDir: n.env.LinkDir, EmulatorLoopDevices: true})
		if err != nil {
			t.Fatal(err)
		}
		c.Mounter = m
	})
	var figures []stageFigure
	for _, fsType := range []string{"ext4", "xfs"} {
		v := encrypted(n.attachNew(100))
		staging, _ := n.kubeletPaths(v)
		started := time.Now()
		if err := n.stage(v, staging, mountCapability(fsType)); err != nil {
			t.Fatalf("NodeStageVolume, %s on LUKS2: %v", fsType, err)
		}
		took := time.Since(started)
		n.unstage(v, staging)
		n.detachAndDelete(v)

		hand := n.attachNew(100)
		byHand := stageByHand(t, hand, fsType, luksSecrets["luksPassphrase"])
		n.detachAndDelete(hand)
		figures = append(figures, stageFigure{FsType: fsType, Stage: took, ByHand: byHand})
		t.Logf("%s on LUKS2, 100 GiB: NodeStageVolume %v, by hand %v", fsType, took.Round(time.Millisecond), byHand.Round(time.Millisecond))
	}
	data, err := json.Marshal(figures)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "p5-luks.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// stageByHand formats the volume's device as LUKS2 with the parameters a
// production node uses, opens it, makes the filesystem on the mapping and
// mounts it, and returns how long that took; it closes everything again.
func stageByHand(t *testing.T, v volume, fsType, passphrase string) time.Duration {
	t.Helper()
	device, err := filepath.EvalSymlinks(v.Link)
	if err != nil {
		t.Fatal(err)
	}
	mapping, mnt := "by-hand-"+v.ID, t.TempDir()
	mkfs := []string{"mkfs." + fsType, "/dev/mapper/" + mapping}
	if fsType == "ext4" {
		mkfs = []string{"mkfs.ext4", "-m0", "/dev/mapper/" + mapping}
	}
	steps := [][]string{
		{"cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--cipher", "aes-xts-plain64", "--key-size", "512",
			"--pbkdf", "argon2id", "--pbkdf-memory", strconv.Itoa(mounter.DefaultLUKSPBKDFMemoryKiB),
			"--iter-time", strconv.FormatInt(mounter.DefaultLUKSPBKDFTime.Milliseconds(), 10), "--key-file", "-", device},
		{"cryptsetup", "open", "--type", "luks", "--allow-discards", "--key-file", "-", device, mapping},
		mkfs,
		{"mount", "/dev/mapper/" + mapping, mnt},
	}
	started := time.Now()
	for _, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		cmd.Stdin = strings.NewReader(passphrase)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", s, err, out)
		}
	}
	took := time.Since(started)
	for _, s := range [][]string{{"umount", mnt}, {"cryptsetup", "close", mapping}} {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", s, err, out)
		}
	}
	return took
}
