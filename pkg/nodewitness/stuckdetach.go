package nodewitness

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud"
)

// StuckAfter is how long a detach may stay detaching or busy in EC2, with
// its instance running, before the witness names it stuck: a detach from a
// guest that released its device takes seconds, so by then the guest holds
// it. With DefaultInterval the event follows within 40 s of the request.
const StuckAfter = 30 * time.Second

// ReasonDetachStuck is the reason of the events on a stuck detach's
// PersistentVolume and Node.
const ReasonDetachStuck = "DetachStuck"

// pendingDetach is one VolumeAttachment of the driver that Kubernetes has
// asked to detach (it is being deleted) and EC2 still shows attached.
type pendingDetach struct {
	pv, node, volumeID string
	instanceID         string
	// state is the attachment's state in EC2: attached (not detached
	// yet), detaching or busy.
	state  string
	waited time.Duration
}

// syncDetaches looks at every detach Kubernetes has asked the driver for
// and EC2 has not finished: each is a point of the pending-detach gauge,
// and one that has stayed detaching or busy past StuckAfter while its
// instance runs gets, once, an event on its PersistentVolume and its Node
// naming the one way out (stop the instance). The witness never detaches
// anything itself: a forced detach from a running guest may lose what it
// has not written yet.
func (w *Witness) syncDetaches(ctx context.Context, nodes map[string]*corev1.Node) error {
	vas, err := w.kube.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return fmt.Errorf("list volumeattachments: %w", err)
	}
	w.pending.Reset()
	seen := map[string]bool{}
	for i := range vas.Items {
		va := &vas.Items[i]
		if va.Spec.Attacher != w.cfg.DriverName || va.DeletionTimestamp == nil {
			continue
		}
		// Still being detached: its events, if it had them, are not
		// recorded again even when this look cannot read it.
		seen[string(va.UID)] = true
		d, ok := w.pendingDetach(ctx, va, nodes[va.Spec.NodeName])
		if !ok {
			continue
		}
		w.pending.WithLabelValues(d.volumeID, d.node, d.state).Set(d.waited.Seconds())
		if d.state == cloud.AttachmentAttached || d.waited < StuckAfter || w.reported[string(va.UID)] {
			continue
		}
		in, err := w.ec2.GetInstance(ctx, d.instanceID)
		if err != nil || in.State != cloud.InstanceRunning {
			// Stopping, stopped or gone: EC2 finishes the detach by
			// itself; unknown: nothing to tell anyone yet.
			continue
		}
		w.reportStuck(d, nodes[d.node])
		w.reported[string(va.UID)] = true
	}
	for uid := range w.reported {
		if !seen[uid] {
			delete(w.reported, uid)
		}
	}
	return nil
}

// pendingDetach completes what a VolumeAttachment being deleted says with
// EC2's view of the attachment; ok is false when EC2 has finished it (or
// the volume or instance cannot be named or read).
func (w *Witness) pendingDetach(ctx context.Context, va *storagev1.VolumeAttachment, node *corev1.Node) (pendingDetach, bool) {
	d := pendingDetach{node: va.Spec.NodeName, waited: time.Since(va.DeletionTimestamp.Time)}
	switch {
	case va.Spec.Source.PersistentVolumeName != nil:
		d.pv = *va.Spec.Source.PersistentVolumeName
		pv, err := w.kube.CoreV1().PersistentVolumes().Get(ctx, d.pv, metav1.GetOptions{})
		if err != nil || pv.Spec.CSI == nil {
			klog.V(4).InfoS("Pending detach: no CSI volume behind the VolumeAttachment", "volumeAttachment", va.Name, "pv", d.pv, "err", err)
			return d, false
		}
		d.volumeID = pv.Spec.CSI.VolumeHandle
	case va.Spec.Source.InlineVolumeSpec != nil && va.Spec.Source.InlineVolumeSpec.CSI != nil:
		d.volumeID = va.Spec.Source.InlineVolumeSpec.CSI.VolumeHandle
	default:
		return d, false
	}
	if node != nil {
		d.instanceID = w.instanceOf(ctx, node)
	}
	if d.instanceID == "" {
		return d, false
	}
	vol, err := w.ec2.GetVolume(ctx, d.volumeID)
	if err != nil {
		klog.V(2).InfoS("Pending detach: EC2 could not say where the volume is attached", "volumeID", d.volumeID, "node", d.node, "err", err)
		return d, false
	}
	for _, a := range vol.Attachments {
		if a.InstanceID == d.instanceID && a.State != cloud.AttachmentDetached {
			d.state = a.State
			return d, true
		}
	}
	return d, false
}

// reportStuck logs a stuck detach and records its events.
func (w *Witness) reportStuck(d pendingDetach, node *corev1.Node) {
	why := "the Node is Ready, so something on it still holds the device: find it, or stop the instance"
	if node == nil || readyStatus(node) != corev1.ConditionTrue {
		why = "the Node is not Ready (its guest hangs or is cut off): stop the instance"
	}
	msg := fmt.Sprintf("Detach of volume %s from instance %s (node %s) has stayed %s in EC2 for %s while the instance runs: its operating system still holds the device; %s (aws ec2 stop-instances --instance-ids %s), and EC2 finishes the detach. Diskplane never forces a detach from a running instance: the guest could still be writing.",
		d.volumeID, d.instanceID, d.node, d.state, d.waited.Round(time.Second), why, d.instanceID)
	klog.InfoS("Detach stuck: the instance runs and holds the device", "volumeID", d.volumeID, "instanceID", d.instanceID, "node", d.node, "pv", d.pv, "state", d.state, "waited", d.waited.Round(time.Second))
	if w.cfg.Recorder == nil {
		return
	}
	if d.pv != "" {
		w.cfg.Recorder.Event(&corev1.ObjectReference{Kind: "PersistentVolume", APIVersion: "v1", Name: d.pv}, corev1.EventTypeWarning, ReasonDetachStuck, msg)
	}
	if node != nil {
		w.event(node, corev1.EventTypeWarning, ReasonDetachStuck, msg)
	}
}
