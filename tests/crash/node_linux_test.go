//go:build linux

package crash

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/mounter/mountertest"
)

const mib = int64(1) << 20

// layout is what a volume is made of on the node.
type layout struct {
	// fsType is ext4 or xfs; "" is a raw block volume.
	fsType string
	// encrypted is LUKS2 made by the node.
	encrypted bool
	// kms: the key is KMS's, unwrapped at NodePublishVolume with the pod's
	// token; otherwise the node-stage secret's passphrase.
	kms bool
}

func (l layout) String() string {
	s := l.fsType
	if s == "" {
		s = "block"
	}
	switch {
	case l.kms:
		return "LUKS2 (KMS key), " + s
	case l.encrypted:
		return "LUKS2 (passphrase), " + s
	}
	return s
}

// size is a new volume's size: xfs needs 300 MB, LUKS2's header 16 MiB.
func (l layout) size() int64 {
	if l.fsType == "xfs" {
		return 336 * mib
	}
	return 64 * mib
}

const passphrase = "crash harness passphrase"

func (l layout) capability() *csi.VolumeCapability {
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	if l.fsType == "" {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: l.fsType}}
	}
	return c
}

func (l layout) volumeContext() map[string]string {
	if !l.encrypted {
		return nil
	}
	vc := map[string]string{volumecontext.NodeEncryptionKey: volumecontext.NodeEncryptionLUKS2}
	if l.kms {
		k := volumecontext.KMSKey{KeyID: "arn:aws:kms:us-east-1:111122223333:key/crash", RoleARN: "arn:aws:iam::111122223333:role/crash",
			Wrapped: []byte("wrapped by KMS")}
		for key, v := range k.VolumeContext() {
			vc[key] = v
		}
	}
	return vc
}

func (l layout) stageSecrets() map[string]string {
	if l.encrypted && !l.kms {
		return map[string]string{volumecontext.PassphraseSecretKey: passphrase}
	}
	return nil
}

// publishSecrets carry the pod's token, as the kubelet passes it with
// the CSIDriver's tokenRequests and serviceAccountTokenInSecrets.
func (l layout) publishSecrets() map[string]string {
	if !l.kms {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"sts.amazonaws.com": map[string]string{
		"token": "header.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6YXBwOmRiIn0.signature", "expirationTimestamp": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}})
	return map[string]string{volumecontext.ServiceAccountTokensKey: string(b)}
}

// volume is one volume attached to the node, with the paths the kubelet
// gives it.
type volume struct {
	*mountertest.Volume
	layout  layout
	staging string
	target  string
	// grownFrom is the capacity a pod saw before the device grew, for an
	// expansion; 0 for other operations.
	grownFrom int64
}

// mapping is the node's LUKS mapping of the volume.
func (v *volume) mapping() string { return "/dev/mapper/diskplane-" + v.ID }

// rpcTimeout bounds one CSI call (the kubelet's is 2 minutes).
const rpcTimeout = 2 * time.Minute

func (h *harness) stage(v *volume) error {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	_, err := h.plugin.client.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: v.ID, StagingTargetPath: v.staging,
		VolumeCapability: v.layout.capability(), VolumeContext: v.layout.volumeContext(), Secrets: v.layout.stageSecrets(),
		PublishContext: map[string]string{volumecontext.DevicePathKey: "/dev/xvdba"}})
	return prefix("NodeStageVolume", err)
}

func (h *harness) publish(v *volume) error {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	_, err := h.plugin.client.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.ID, StagingTargetPath: v.staging,
		TargetPath: v.target, VolumeCapability: v.layout.capability(), VolumeContext: v.layout.volumeContext(),
		Secrets: v.layout.publishSecrets(), PublishContext: map[string]string{volumecontext.DevicePathKey: "/dev/xvdba"}})
	return prefix("NodePublishVolume", err)
}

func (h *harness) unpublish(v *volume) error {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	_, err := h.plugin.client.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.ID, TargetPath: v.target})
	return prefix("NodeUnpublishVolume", err)
}

func (h *harness) unstage(v *volume) error {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	_, err := h.plugin.client.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.ID, StagingTargetPath: v.staging})
	return prefix("NodeUnstageVolume", err)
}

func (h *harness) expand(v *volume) error {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	_, err := h.plugin.client.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: v.ID, VolumePath: v.target,
		StagingTargetPath: v.staging, VolumeCapability: v.layout.capability(), Secrets: v.layout.stageSecrets(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: fileSize(h.t, v.File)}})
	return prefix("NodeExpandVolume", err)
}

// stageAll stages and publishes v, as the kubelet does for a pod.
func (h *harness) stageAll(v *volume) error {
	if err := h.stage(v); err != nil {
		return err
	}
	return h.publish(v)
}

// unstageAll unpublishes and unstages v, as the kubelet does when its pod
// goes.
func (h *harness) unstageAll(v *volume) error {
	if err := h.unpublish(v); err != nil {
		return err
	}
	return h.unstage(v)
}

func prefix(rpc string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", rpc, err)
	}
	return nil
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// grow makes v larger by 64 MiB, as an EBS modification does.
func grow(t *testing.T, v *volume) { v.Grow(t, fileSize(t, v.File)+64*mib) }

// payload is data a pod writes: a file of a filesystem, or bytes at an
// offset of a block device.
type payload struct {
	name  string
	bytes []byte
	// offset is where a block volume holds it.
	offset int64
}

func newPayload(name string, offset int64) payload {
	b := make([]byte, 128<<10)
	for i := range b {
		b[i] = byte(i*7 + len(name)*31 + int(offset>>20))
	}
	copy(b, name)
	return payload{name: name, bytes: b, offset: offset}
}

// write writes p through v's publication and flushes it to the device.
func write(v *volume, p payload) error {
	if v.layout.fsType != "" {
		f, err := os.OpenFile(filepath.Join(v.target, p.name), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		if _, err := f.Write(p.bytes); err != nil {
			f.Close()
			return err
		}
		if err := unix.Syncfs(int(f.Fd())); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	f, err := os.OpenFile(v.target, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(p.bytes, p.offset); err != nil {
		return err
	}
	return f.Sync()
}

// check reads p back through v's publication.
func check(v *volume, p payload) error {
	var got []byte
	if v.layout.fsType != "" {
		b, err := os.ReadFile(filepath.Join(v.target, p.name))
		if err != nil {
			return fmt.Errorf("data lost: %v", err)
		}
		got = b
	} else {
		f, err := os.Open(v.target)
		if err != nil {
			return err
		}
		defer f.Close()
		got = make([]byte, len(p.bytes))
		if _, err := f.ReadAt(got, p.offset); err != nil && err != io.EOF {
			return err
		}
	}
	if !bytes.Equal(got, p.bytes) {
		return fmt.Errorf("data lost: %s reads back different", p.name)
	}
	return nil
}

// published reports whether v is staged and published: its target is a
// mount point.
func published(v *volume) bool {
	return isMountPoint(v.target)
}

func isMountPoint(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// mappingOpen reports whether v's LUKS mapping is open.
func mappingOpen(v *volume) bool {
	_, err := os.Lstat(v.mapping())
	return err == nil
}

// release takes down whatever of v the node holds — mounts, the mapping —
// as a reboot does, and detaches v.
func release(t *testing.T, v *volume) {
	t.Helper()
	for _, p := range []string{v.target, v.staging} {
		for isMountPoint(p) {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", p, err)
				break
			}
		}
	}
	if mappingOpen(v) {
		name := filepath.Base(v.mapping())
		if out, err := exec.Command("cryptsetup", "close", name).CombinedOutput(); err != nil {
			if out2, err2 := exec.Command("dmsetup", "remove", "--force", "--retry", name).CombinedOutput(); err2 != nil {
				t.Errorf("close %s: %v: %s; dmsetup: %v: %s", name, err, out, err2, out2)
			}
		}
	}
	v.Detach(t)
}
