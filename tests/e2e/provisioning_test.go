//go:build e2e

package e2e

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// TestDynamicProvisioning applies examples/dynamic-provisioning (with ext4,
// as written, and with xfs) and examples/block-volume: the claim gets a new
// EC2 volume in the node's zone, attached to the node's instance; the pod
// sees a filesystem of the class's type (or a raw device); what it writes
// is still there after the pod is deleted and created again.
func TestDynamicProvisioning(t *testing.T) {
	t.Parallel()
	for _, fsType := range []string{"ext4", "xfs"} {
		t.Run(fsType, func(t *testing.T) {
			t.Parallel()
			sc := newScenario(t)
			m := sc.example("dynamic-provisioning")
			set(t, m.get(t, "StorageClass"), fsType, "parameters", "csi.storage.k8s.io/fstype")
			pod := m.get(t, "Pod").DeepCopy()
			sc.create(m...)
			sc.podReady("app")
			_, pv := sc.claimBound("diskplane-claim")
			checkAttachedVolume(t, pv, 4)

			mount := strings.Fields(sc.exec("app", "grep ' /data ' /proc/mounts"))
			if len(mount) < 3 || mount[2] != fsType {
				t.Fatalf("/data in the pod is mounted as %v, want a %s filesystem", mount, fsType)
			}
			marker := "diskplane-e2e-" + sc.suffix
			sc.exec("app", "echo "+marker+" > /data/marker && sync")

			sc.deletePod("app")
			sc.create(pod)
			sc.podReady("app")
			if got := strings.TrimSpace(sc.exec("app", "cat /data/marker")); got != marker {
				t.Fatalf("after the pod was created again, /data/marker holds %q, want %q", got, marker)
			}
		})
	}
	t.Run("block", func(t *testing.T) {
		t.Parallel()
		sc := newScenario(t)
		m := append(sc.example("dynamic-provisioning").without("PersistentVolumeClaim", "Pod"), sc.example("block-volume")...)
		pod := m.get(t, "Pod").DeepCopy()
		sc.create(m...)
		sc.podReady("block-app")
		_, pv := sc.claimBound("diskplane-block-claim")
		if pv.Spec.VolumeMode == nil || *pv.Spec.VolumeMode != corev1.PersistentVolumeBlock {
			t.Fatalf("volume %s has mode %v, want Block", pv.Name, pv.Spec.VolumeMode)
		}
		checkAttachedVolume(t, pv, 4)
		sc.exec("block-app", "test -b /dev/xvdb")
		// The example's pod writes a line to the device and reads it back.
		logs, err := env.client.CoreV1().Pods(sc.ns).GetLogs("block-app", &corev1.PodLogOptions{}).DoRaw(t.Context())
		if err != nil || !strings.HasPrefix(string(logs), "written at ") {
			t.Fatalf("block-app's log: %q (%v), want the line it wrote to the device and read back", logs, err)
		}

		// 1 MiB into the device, past what the pod itself writes at its start.
		const write = "printf %s | dd of=/dev/xvdb bs=512 seek=2048 conv=sync,fsync 2>/dev/null"
		const read = "dd if=/dev/xvdb bs=512 skip=2048 count=1 2>/dev/null | tr -d '\\000'"
		marker := "diskplane-e2e-" + sc.suffix
		sc.exec("block-app", strings.Replace(write, "%s", marker, 1))
		if got := sc.exec("block-app", read); got != marker {
			t.Fatalf("read back %q from the device, want %q", got, marker)
		}
		sc.deletePod("block-app")
		sc.create(pod)
		sc.podReady("block-app")
		if got := sc.exec("block-app", read); got != marker {
			t.Fatalf("after the pod was created again, the device holds %q, want %q", got, marker)
		}
	})
}

// checkAttachedVolume checks the EC2 volume behind a bound PV, as the
// emulator sees it while a pod uses it: a gp3 volume of the size in the
// node's zone, attached to the node's instance with a device on this host.
func checkAttachedVolume(t *testing.T, pv *corev1.PersistentVolume, sizeGiB int32) model.Volume {
	t.Helper()
	vol := env.emulator.volume(t, pv.Spec.CSI.VolumeHandle)
	if vol.Type != "gp3" || vol.Size != sizeGiB || vol.Zone != env.zone {
		t.Errorf("EC2 volume %s is %s, %d GiB, in %s; want gp3, %d GiB, in the node's zone %s",
			vol.ID, vol.Type, vol.Size, vol.Zone, sizeGiB, env.zone)
	}
	if len(vol.Attachments) != 1 || vol.Attachments[0].InstanceID != env.instanceID ||
		vol.Attachments[0].State != model.AttachmentAttached || vol.Attachments[0].HostDevice == "" {
		t.Errorf("EC2 volume %s: attachments %+v, want one, attached to %s with a device on this host",
			vol.ID, attachments(vol), env.instanceID)
	}
	if got := vol.Tags["kubernetes.io/created-for/pv/name"]; got != pv.Name {
		t.Errorf("EC2 volume %s is tagged for PV %q, want %q", vol.ID, got, pv.Name)
	}
	return vol
}

func attachments(v model.Volume) []model.Attachment {
	var out []model.Attachment
	for _, a := range v.Attachments {
		out = append(out, *a)
	}
	return out
}
