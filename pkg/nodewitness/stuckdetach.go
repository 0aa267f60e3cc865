package nodewitness

import (
	"context"
	"fmt"
	"slices"
	"sync"
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
	uid                string // the VolumeAttachment's
	pv, node, volumeID string
	instanceID         string
	// state is the attachment's state in EC2: attached (not detached
	// yet), detaching or busy.
	state  string
	waited time.Duration
}

// pendingAfter is how long a detach goes unlooked-at: most finish well
// within it, and reading EC2 for every young one would spend its request
// budget on detaches about to end.
const pendingAfter = 10 * time.Second

// syncDetaches looks at every detach Kubernetes asked the driver for at
// least pendingAfter ago and EC2 has not finished: each is a point of the
// pending-detach gauge, and one that has stayed detaching or busy past
// StuckAfter while its instance runs gets, once, an event on its
// PersistentVolume and its Node naming the one way out (stop the
// instance). The witness never detaches anything itself: a forced detach
// from a running guest may lose what it has not written yet. The volumes
// are read from EC2 all at once, so that the cloud layer's batcher asks for
// them in pages (a zone's worth of detaches costs a few DescribeVolumes),
// and the PersistentVolumes in one list from the API server's cache.
func (w *Witness) syncDetaches(ctx context.Context, nodes map[string]*corev1.Node) error {
	vas, err := w.kube.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return fmt.Errorf("list volumeattachments: %w", err)
	}
	seen := map[string]bool{}
	var old []*storagev1.VolumeAttachment
	for i := range vas.Items {
		va := &vas.Items[i]
		if va.Spec.Attacher != w.cfg.DriverName || va.DeletionTimestamp == nil {
			continue
		}
		// Still being detached: its events, if it had them, are not
		// recorded again even when this look cannot read it.
		seen[string(va.UID)] = true
		if time.Since(va.DeletionTimestamp.Time) >= pendingAfter {
			old = append(old, va)
		}
	}
	for uid := range w.reported {
		if !seen[uid] {
			delete(w.reported, uid)
		}
	}
	pending, err := w.pendingDetaches(ctx, old, nodes)
	w.pending.Reset()
	if err != nil {
		return err
	}
	running := map[string]bool{} // by instance, asked once a look
	for _, d := range pending {
		w.pending.WithLabelValues(d.volumeID, d.node, d.state).Set(d.waited.Seconds())
		if d.state == cloud.AttachmentAttached || d.waited < StuckAfter || w.reported[d.uid] {
			continue
		}
		up, asked := running[d.instanceID]
		if !asked {
			in, err := w.ec2.GetInstance(ctx, d.instanceID)
			// Stopping, stopped or gone: EC2 finishes the detach by
			// itself; unknown: nothing to tell anyone yet.
			up = err == nil && in.State == cloud.InstanceRunning
			running[d.instanceID] = up
		}
		if up {
			w.reportStuck(d, nodes[d.node])
			w.reported[d.uid] = true
		}
	}
	return nil
}

// pendingDetaches completes what the VolumeAttachments being deleted say
// with EC2's view of each attachment, and keeps the ones EC2 has not
// finished (those whose volume or instance cannot be named or read are
// left out, and logged).
func (w *Witness) pendingDetaches(ctx context.Context, vas []*storagev1.VolumeAttachment, nodes map[string]*corev1.Node) ([]pendingDetach, error) {
	if len(vas) == 0 {
		return nil, nil
	}
	handles, err := w.volumeHandles(ctx)
	if err != nil {
		return nil, err
	}
	instances := map[string]string{} // by node
	var all []pendingDetach
	for _, va := range vas {
		d := pendingDetach{uid: string(va.UID), node: va.Spec.NodeName, waited: time.Since(va.DeletionTimestamp.Time)}
		switch {
		case va.Spec.Source.PersistentVolumeName != nil:
			d.pv = *va.Spec.Source.PersistentVolumeName
			d.volumeID = handles[d.pv]
		case va.Spec.Source.InlineVolumeSpec != nil && va.Spec.Source.InlineVolumeSpec.CSI != nil:
			d.volumeID = va.Spec.Source.InlineVolumeSpec.CSI.VolumeHandle
		}
		id, ok := instances[d.node]
		if !ok {
			if node := nodes[d.node]; node != nil {
				id = w.instanceOf(ctx, node)
			}
			instances[d.node] = id
		}
		d.instanceID = id
		if d.volumeID == "" || d.instanceID == "" {
			klog.V(4).InfoS("Pending detach: its volume or instance cannot be named", "volumeAttachment", va.Name, "pv", d.pv, "node", d.node)
			continue
		}
		all = append(all, d)
	}
	var (
		wg    sync.WaitGroup
		slots = make(chan struct{}, maxConcurrentLooks)
	)
	for i := range all {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			d := &all[i]
			vol, err := w.ec2.GetVolume(ctx, d.volumeID)
			if err != nil {
				klog.V(2).InfoS("Pending detach: EC2 could not say where the volume is attached", "volumeID", d.volumeID, "node", d.node, "err", err)
				return
			}
			for _, a := range vol.Attachments {
				if a.InstanceID == d.instanceID && a.State != cloud.AttachmentDetached {
					d.state = a.State
				}
			}
		}()
	}
	wg.Wait()
	return slices.DeleteFunc(all, func(d pendingDetach) bool { return d.state == "" }), nil
}

// volumeHandles maps the driver's PersistentVolumes to their volume IDs,
// from the API server's cache.
func (w *Witness) volumeHandles(ctx context.Context) (map[string]string, error) {
	pvs, err := w.kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("list persistentvolumes: %w", err)
	}
	handles := make(map[string]string, len(pvs.Items))
	for _, pv := range pvs.Items {
		if csi := pv.Spec.CSI; csi != nil && csi.Driver == w.cfg.DriverName {
			handles[pv.Name] = csi.VolumeHandle
		}
	}
	return handles, nil
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
