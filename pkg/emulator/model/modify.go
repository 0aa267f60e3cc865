package model

import (
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// modificationWindow is the rolling window of EC2's per-volume modification
// budget.
const modificationWindow = 24 * time.Hour

// ModifyVolumeInput is a ModifyVolume request; zero and nil mean "keep".
type ModifyVolumeInput struct {
	VolumeID    string
	Size        int32
	Type        string
	Iops        *int32
	Throughput  *int32
	MultiAttach *bool
	DryRun      bool
}

// ModifyVolume starts a modification: "modifying" for the Modify latency,
// then "optimizing" (the volume has its new size and settings from here on)
// for the Optimize latency, then "completed". Volumes only grow; a volume
// takes one modification at a time and a limited number per day.
func (c *Cloud) ModifyVolume(in ModifyVolumeInput) (Modification, error) {
	var out Modification
	err := c.do(func(now time.Time) error {
		v, e := c.volumeByID(in.VolumeID, 0, now)
		if e != nil {
			return e
		}
		if v.State != VolumeAvailable && v.State != VolumeInUse {
			return Errorf(CodeIncorrectState, "Volume '%s' is in the '%s' state.", v.ID, v.State)
		}
		if m := c.st.Modifications[v.ID]; m != nil && (m.State == ModificationModifying || m.State == ModificationOptimizing) {
			return Errorf(CodeIncorrectModificationState, "Volume %s cannot be modified in modification state %s", v.ID, strings.ToUpper(string(m.State)))
		}
		starts := recentStarts(c.st.ModificationStarts[v.ID], now)
		if limit := c.cfg.ModificationsPerDay; limit > 0 && len(starts) >= limit {
			return Errorf(CodeVolumeModificationRateExceeded, "You've reached the maximum modification rate per volume limit (%d modifications in 24 hours).", limit)
		}
		cur := volumeSettings(v)
		if in.MultiAttach != nil && *in.MultiAttach != v.MultiAttach && v.State == VolumeInUse {
			return Errorf(CodeIncorrectState, "Multi-Attach can be changed only while volume '%s' is not attached.", v.ID)
		}
		target, e := modifySettings(cur, requestedSettings{
			Type: in.Type, Size: in.Size, Iops: in.Iops, Throughput: in.Throughput, MultiAttach: in.MultiAttach,
		})
		if e != nil {
			return e
		}
		if target.Size > cur.Size || target.Type != cur.Type {
			if e := c.checkStorageQuota(target.Type, target.Size, v.ID); e != nil {
				return e
			}
		}
		if in.DryRun {
			return dryRunError()
		}
		m := &Modification{
			VolumeID:  v.ID,
			State:     ModificationModifying,
			Original:  cur,
			Target:    target,
			StartTime: now.UTC(),
			Due:       c.latency.due(transitionModify, v.ID, now),
		}
		c.st.Modifications[v.ID] = m
		c.st.ModificationStarts[v.ID] = append(starts, now.UTC())
		c.markDirty()
		out = *m
		klog.V(2).InfoS("Volume modifying", "volumeID", v.ID, "from", cur, "to", target)
		return nil
	})
	return out, err
}

// volumeSettings are a volume's current modifiable parameters.
func volumeSettings(v *Volume) VolumeSettings {
	return VolumeSettings{Size: v.Size, Type: v.Type, Iops: v.Iops, Throughput: v.Throughput, MultiAttach: v.MultiAttach}
}

// recentStarts keeps the modification start times within the window.
func recentStarts(starts []time.Time, now time.Time) []time.Time {
	out := starts[:0:0]
	for _, t := range starts {
		if now.Sub(t) < modificationWindow {
			out = append(out, t)
		}
	}
	return out
}

// modificationPaging are DescribeVolumesModifications' MaxResults bounds.
var modificationPaging = pageRules{min: 5, max: 500}

// DescribeVolumesModifications lists the latest modification of volumes.
// Asking by ID for a volume that was never modified is an error, as on EC2.
func (c *Cloud) DescribeVolumesModifications(q Query) (Page[Modification], error) {
	var page Page[Modification]
	err := c.do(func(now time.Time) error {
		size, e := checkPaging(q, modificationPaging)
		if e != nil {
			return e
		}
		w := c.readWorld(now, q.Lag)
		var items []Modification
		if len(q.IDs) > 0 {
			for _, id := range dedupe(q.IDs) {
				if _, e := w.volume(id, q.Hide, now); e != nil {
					return e
				}
				m := w.modifications[id]
				if m == nil {
					return Errorf(CodeInvalidVolumeModNotFound, "Modification for volume '%s' does not exist.", id)
				}
				items = append(items, *m)
			}
		} else {
			for _, m := range w.modifications {
				items = append(items, *m)
			}
		}
		items, e = filterItems(items, q.Filters, modificationField, func(Modification) map[string]string { return nil })
		if e != nil {
			return e
		}
		page, e = paginate(items, func(m Modification) string { return m.VolumeID }, q, size)
		return asError(e)
	})
	return page, err
}

// modificationField answers the DescribeVolumesModifications filters.
func modificationField(m Modification, name string) ([]string, bool) {
	itoa := func(n int32) []string { return []string{strconv.Itoa(int(n))} }
	switch name {
	case "volume-id":
		return []string{m.VolumeID}, true
	case "modification-state":
		return []string{string(m.State)}, true
	case "target-size":
		return itoa(m.Target.Size), true
	case "target-iops":
		return itoa(m.Target.ReportedIops()), true
	case "target-volume-type":
		return []string{m.Target.Type}, true
	case "targetMultiAttachEnabled":
		return []string{boolString(m.Target.MultiAttach)}, true
	case "original-size":
		return itoa(m.Original.Size), true
	case "original-iops":
		return itoa(m.Original.ReportedIops()), true
	case "original-volume-type":
		return []string{m.Original.Type}, true
	case "originalMultiAttachEnabled":
		return []string{boolString(m.Original.MultiAttach)}, true
	case "start-time":
		return []string{m.StartTime.UTC().Format(TimeFormat)}, true
	}
	return nil, false
}
