package model

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"k8s.io/klog/v2"
)

// CreateSnapshotInput is a CreateSnapshot request.
type CreateSnapshotInput struct {
	VolumeID    string
	Description string
	Tags        map[string]string
	DryRun      bool
}

// CreateSnapshot takes a point-in-time copy of a volume's bytes at the
// request; the snapshot is "pending" with growing progress until the
// Snapshot latency has passed, then "completed".
func (c *Cloud) CreateSnapshot(in CreateSnapshotInput) (Snapshot, error) {
	var out Snapshot
	err := c.do(func(now time.Time) error {
		v, e := c.volumeByID(in.VolumeID, 0, now)
		if e != nil {
			return e
		}
		if v.State != VolumeAvailable && v.State != VolumeInUse {
			return Errorf(CodeIncorrectState, "The volume '%s' is in the '%s' state.", v.ID, v.State)
		}
		if e := checkTags(in.Tags); e != nil {
			return e
		}
		if e := c.checkSnapshotQuota(); e != nil {
			return e
		}
		if in.DryRun {
			return dryRunError()
		}
		id := newID("snap")
		s := &Snapshot{
			ID:          id,
			VolumeID:    v.ID,
			VolumeSize:  v.Size,
			State:       SnapshotPending,
			StartTime:   now.UTC(),
			Description: in.Description,
			Encrypted:   v.Encrypted,
			KmsKeyID:    v.KmsKeyID,
			OwnerID:     c.cfg.AccountID,
			Tags:        maps.Clone(in.Tags),
			Due:         c.latency.due(transitionSnapshot, id, now),
		}
		if err := c.cfg.Store.CreateSnapshot(s.ID, v.ID); err != nil {
			return fmt.Errorf("disk store: snapshot %s of %s: %w", s.ID, v.ID, err)
		}
		s.Failing = c.cfg.FailAsync != nil && c.cfg.FailAsync("CreateSnapshot", "")
		c.st.Snapshots[s.ID] = s
		c.markDirty()
		out = cloneSnapshot(s)
		klog.V(2).InfoS("Snapshot started", "snapshotID", s.ID, "volumeID", v.ID)
		return nil
	})
	return out, err
}

// DeleteSnapshot deletes a snapshot and its bytes at once.
func (c *Cloud) DeleteSnapshot(id string, dryRun bool) error {
	return c.do(func(time.Time) error {
		s, e := c.snapshotByID(id)
		if e != nil {
			return e
		}
		if dryRun {
			return dryRunError()
		}
		if err := c.cfg.Store.DeleteSnapshot(s.ID); err != nil {
			return fmt.Errorf("disk store: delete snapshot %s: %w", s.ID, err)
		}
		delete(c.st.Snapshots, s.ID)
		c.markDirty()
		klog.V(2).InfoS("Snapshot deleted", "snapshotID", s.ID)
		return nil
	})
}

// snapshotByID finds a snapshot with EC2's errors for a bad or unknown ID.
func (c *Cloud) snapshotByID(id string) (*Snapshot, *Error) {
	if e := checkSnapshotID(id); e != nil {
		return nil, e
	}
	s := c.st.Snapshots[id]
	if s == nil {
		return nil, snapshotNotFound(id)
	}
	return s, nil
}

// SnapshotQuery is a DescribeSnapshots request: a Query plus the owners to
// include ("self" or account IDs).
type SnapshotQuery struct {
	Query
	Owners []string
}

// snapshotPaging are DescribeSnapshots' MaxResults bounds.
var snapshotPaging = pageRules{param: "snapshotSet", min: 5, max: 1000}

// DescribeSnapshots lists snapshots by ID, owner and filters.
func (c *Cloud) DescribeSnapshots(q SnapshotQuery) (Page[Snapshot], error) {
	var page Page[Snapshot]
	err := c.do(func(now time.Time) error {
		size, e := checkPaging(q.Query, snapshotPaging)
		if e != nil {
			return e
		}
		w := c.readWorld(now, q.Lag)
		var items []Snapshot
		if len(q.IDs) > 0 {
			var missing []string
			for _, id := range dedupe(q.IDs) {
				if e := checkSnapshotID(id); e != nil {
					return e
				}
				s := w.snapshots[id]
				if s == nil || !visible(s.StartTime, now, q.Hide) {
					missing = append(missing, id)
					continue
				}
				items = append(items, cloneSnapshot(s))
			}
			if len(missing) > 0 {
				return snapshotNotFound(missing...)
			}
		} else {
			for _, s := range w.snapshots {
				if visible(s.StartTime, now, q.Hide) {
					items = append(items, cloneSnapshot(s))
				}
			}
		}
		if len(q.Owners) > 0 && !slices.Contains(q.Owners, "self") && !slices.Contains(q.Owners, c.cfg.AccountID) {
			items = nil
		}
		items, e = filterItems(items, q.Filters, snapshotField, func(s Snapshot) map[string]string { return s.Tags })
		if e != nil {
			return e
		}
		page, e = paginate(items, func(s Snapshot) string { return s.ID }, q.Query, size)
		return asError(e)
	})
	return page, err
}

// snapshotField answers the DescribeSnapshots filters.
func snapshotField(s Snapshot, name string) ([]string, bool) {
	switch name {
	case "snapshot-id":
		return []string{s.ID}, true
	case "volume-id":
		return []string{s.VolumeID}, true
	case "status":
		return []string{string(s.State)}, true
	case "owner-id":
		return []string{s.OwnerID}, true
	case "progress":
		return []string{strconv.Itoa(s.Progress) + "%"}, true
	case "volume-size":
		return []string{strconv.Itoa(int(s.VolumeSize))}, true
	case "encrypted":
		return []string{boolString(s.Encrypted)}, true
	case "description":
		return []string{s.Description}, true
	case "start-time":
		return []string{s.StartTime.UTC().Format(TimeFormat)}, true
	}
	return nil, false
}

// Snapshots returns every snapshot, for the admin view and tests.
func (c *Cloud) Snapshots() []Snapshot {
	var out []Snapshot
	_ = c.do(func(time.Time) error {
		for _, s := range c.st.Snapshots {
			out = append(out, cloneSnapshot(s))
		}
		return nil
	})
	sortByID(out, func(s Snapshot) string { return s.ID })
	return out
}
