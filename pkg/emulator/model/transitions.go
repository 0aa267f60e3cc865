package model

import (
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
)

// advance applies every state change that is due at now. Host-side steps
// (the disk store's attach, detach, resize, delete) that fail are retried at
// the next advance; a detach of a busy device waits the same way.
func (c *Cloud) advance(now time.Time) {
	// Instances first: a terminated one releases its volumes in this step.
	for id, in := range c.st.Instances {
		if !c.advanceInstance(in, now) {
			delete(c.st.Instances, id)
			c.markDirty()
			klog.V(2).InfoS("Terminated instance forgotten", "instanceID", id)
		}
	}
	for id, v := range c.st.Volumes {
		// A volume that failed disappears like a deleted one, but not in the
		// same step that failed it: a client sees it in "error" first.
		leaving := v.State == VolumeDeleting || (v.State == VolumeError && v.Failing)
		if !leaving || now.Before(v.Due) {
			c.advanceVolume(v, now)
			continue
		}
		if err := c.cfg.Store.DeleteVolume(id); err != nil && !errors.Is(err, disks.ErrNotFound) {
			klog.ErrorS(err, "Disk store could not delete the volume; will retry", "volumeID", id)
			continue
		}
		delete(c.st.Volumes, id)
		delete(c.st.Modifications, id)
		delete(c.st.ModificationStarts, id)
		c.markDirty()
		klog.V(2).InfoS("Volume deleted", "volumeID", id)
	}
	for _, s := range c.st.Snapshots {
		c.advanceSnapshot(s, now)
	}
	for _, m := range c.st.Modifications {
		c.advanceModification(m, now)
	}
}

// advanceVolume moves a volume out of "creating" and its attachments along.
func (c *Cloud) advanceVolume(v *Volume, now time.Time) {
	if v.State == VolumeCreating && !now.Before(v.Due) {
		v.State = VolumeAvailable
		v.Due = time.Time{}
		if v.Failing {
			// It disappears as a deleted volume does, a while later.
			v.State = VolumeError
			v.Due = c.latency.due(transitionVolumeDelete, v.ID, now)
			klog.InfoS("Fault: volume failed", "volumeID", v.ID, "kmsKeyId", v.KmsKeyID)
		}
		c.markDirty()
	}
	kept := v.Attachments[:0]
	for _, a := range v.Attachments {
		if c.advanceAttachment(v, a, now) {
			kept = append(kept, a)
		}
	}
	clear(v.Attachments[len(kept):])
	v.Attachments = kept
	if len(v.Attachments) == 0 && v.State == VolumeInUse {
		v.State = VolumeAvailable
		v.Attachments = nil
		c.markDirty()
	}
}

// advanceAttachment completes an attach or detach that is due; it reports
// whether the attachment still exists.
func (c *Cloud) advanceAttachment(v *Volume, a *Attachment, now time.Time) bool {
	host := c.onHost(v, a)
	switch {
	case a.State == AttachmentAttaching && !a.Stuck && !now.Before(a.Due):
		if host {
			dev, err := c.cfg.Store.Attach(v.ID)
			if err != nil {
				klog.ErrorS(err, "Disk store could not attach the volume; will retry", "volumeID", v.ID)
				return true
			}
			if view := c.viewOf(a); view != nil && dev != "" && c.running(a) {
				if err := view.Expose(v.ID, dev); err != nil {
					klog.ErrorS(err, "Could not expose the volume to its instance; will retry", "volumeID", v.ID, "instanceID", a.InstanceID)
					return true
				}
			}
			a.HostDevice = dev
		}
		a.State = AttachmentAttached
		a.Due = time.Time{}
		c.markDirty()
		klog.V(2).InfoS("Volume attached", "volumeID", v.ID, "instanceID", a.InstanceID, "device", a.Device, "hostDevice", a.HostDevice)
	case a.State == AttachmentDetaching && !now.Before(a.Due):
		if host && !c.sharedOnHost(v, a) {
			// A stopped guest cannot release the device: EC2 does not wait.
			force := a.Force || !c.running(a)
			if err := c.cfg.Store.Detach(v.ID, force); err != nil && !errors.Is(err, disks.ErrNotFound) {
				if !errors.Is(err, disks.ErrBusy) {
					klog.ErrorS(err, "Disk store could not detach the volume; will retry", "volumeID", v.ID)
				}
				return true
			}
		}
		if view := c.viewOf(a); view != nil {
			if err := view.Withdraw(v.ID, a.HostDevice); err != nil {
				klog.ErrorS(err, "Could not withdraw the volume from its instance; will retry", "volumeID", v.ID, "instanceID", a.InstanceID)
				return true
			}
		}
		c.markDirty()
		klog.V(2).InfoS("Volume detached", "volumeID", v.ID, "instanceID", a.InstanceID, "device", a.Device)
		return false
	}
	return true
}

// onHost reports whether an attachment is backed by a device on this host:
// the volume is attached to the local instance or to one with a view.
func (c *Cloud) onHost(v *Volume, a *Attachment) bool {
	if v.Root {
		return false
	}
	in := c.st.Instances[a.InstanceID]
	return in != nil && (in.Local || in.View != nil)
}

// viewOf is the view of the attachment's instance, or nil.
func (c *Cloud) viewOf(a *Attachment) *disks.View {
	if in := c.st.Instances[a.InstanceID]; in != nil {
		return in.View
	}
	return nil
}

// sharedOnHost reports whether another instance the host plays still uses
// the volume's device (a multi-attached volume), so that detaching a from
// its instance must leave the device bound.
func (c *Cloud) sharedOnHost(v *Volume, a *Attachment) bool {
	for _, o := range v.Attachments {
		if o != a && c.onHost(v, o) && (o.State == AttachmentAttached || o.State == AttachmentDetaching) {
			return true
		}
	}
	return false
}

// advanceSnapshot updates a pending snapshot's progress and completes it.
func (c *Cloud) advanceSnapshot(s *Snapshot, now time.Time) {
	if s.State != SnapshotPending {
		return
	}
	if !now.Before(s.Due) && s.Failing {
		s.State = SnapshotError
		s.StateMessage = "Snapshot failed: an internal error occurred while copying the volume's data."
		s.Due = time.Time{}
		c.markDirty()
		klog.InfoS("Fault: snapshot failed", "snapshotID", s.ID, "volumeID", s.VolumeID)
		return
	}
	if !now.Before(s.Due) {
		s.State = SnapshotCompleted
		s.Progress = 100
		s.Completion = now.UTC()
		s.Due = time.Time{}
		c.markDirty()
		klog.V(2).InfoS("Snapshot completed", "snapshotID", s.ID, "volumeID", s.VolumeID)
		return
	}
	if p := fraction(s.StartTime, s.Due, now, 99); p != s.Progress {
		s.Progress = p
		c.markDirty()
	}
}

// advanceModification moves a modification from modifying to optimizing
// (growing the volume's bytes, so a mounted filesystem can grow) and then
// to completed.
func (c *Cloud) advanceModification(m *Modification, now time.Time) {
	switch m.State {
	case ModificationModifying:
		if now.Before(m.Due) {
			return
		}
		v := c.st.Volumes[m.VolumeID]
		if v == nil {
			return
		}
		if m.Target.Size > v.Size {
			if err := c.cfg.Store.ResizeVolume(v.ID, int64(m.Target.Size)*gib); err != nil {
				klog.ErrorS(err, "Disk store could not grow the volume; will retry", "volumeID", v.ID)
				return
			}
		}
		v.Size, v.Type, v.Iops, v.Throughput, v.MultiAttach = m.Target.Size, m.Target.Type, m.Target.Iops, m.Target.Throughput, m.Target.MultiAttach
		m.State = ModificationOptimizing
		m.Progress = 0
		m.PhaseStart, m.Due = now, c.latency.due(transitionOptimize, m.VolumeID, now)
		c.markDirty()
		klog.V(2).InfoS("Volume modification optimizing", "volumeID", v.ID, "size", v.Size, "type", v.Type)
		c.advanceModification(m, now)
	case ModificationOptimizing:
		if !now.Before(m.Due) {
			m.State = ModificationCompleted
			m.Progress = 100
			m.EndTime = now.UTC()
			m.Due = time.Time{}
			c.markDirty()
			klog.V(2).InfoS("Volume modification completed", "volumeID", m.VolumeID)
			return
		}
		start := m.PhaseStart
		if start.IsZero() { // a state saved before phase starts were kept
			start = m.Due.Add(-c.cfg.Latencies.Optimize)
		}
		if p := fraction(start, m.Due, now, 99); p != m.Progress {
			m.Progress = p
			c.markDirty()
		}
	}
}

// retryIfBlocked is the pause before retrying a change that was due at next
// but is still pending at now.
func retryIfBlocked(next, now time.Time) time.Duration {
	if next.After(now) {
		return 0
	}
	return retryInterval
}

// fraction is how far now is from start to end, in percent, capped.
func fraction(start, end, now time.Time, limit int) int {
	total := end.Sub(start)
	if total <= 0 {
		return limit
	}
	return min(int(100*now.Sub(start)/total), limit)
}

// nextWakeLocked returns how long until the next state change falls due;
// pending is false when nothing is in flight.
func (c *Cloud) nextWakeLocked(now time.Time) (wait time.Duration, pending bool) {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, v := range c.st.Volumes {
		if v.State == VolumeCreating || v.State == VolumeDeleting || (v.State == VolumeError && v.Failing) {
			consider(v.Due)
		}
		for _, a := range v.Attachments {
			if (a.State == AttachmentAttaching && !a.Stuck) || a.State == AttachmentDetaching {
				consider(a.Due)
			}
		}
	}
	for _, s := range c.st.Snapshots {
		if s.State == SnapshotPending {
			consider(s.Due)
		}
	}
	for _, m := range c.st.Modifications {
		if m.State == ModificationModifying || m.State == ModificationOptimizing {
			consider(m.Due)
		}
	}
	for _, in := range c.st.Instances {
		consider(in.StateDue)
		if in.StateValue() == InstanceTerminated {
			consider(in.StateChanged.Add(terminatedVisible))
		}
	}
	if next.IsZero() {
		return 0, false
	}
	// A change already due is one the last advance could not make (a busy
	// device, a failing store): try it again a little later, not at once.
	return max(next.Sub(now), 0) + retryIfBlocked(next, now), true
}
