package model

import (
	"time"
)

// world is what the Describe* calls read: the volumes (with their
// attachments and tags), snapshots and modifications. The current world is
// the state itself; a stale read gets one from the recent past.
type world struct {
	at            time.Time
	volumes       map[string]*Volume
	snapshots     map[string]*Snapshot
	modifications map[string]*Modification
}

// history keeps the states of the last StaleWindow, oldest first, so a
// stale read can answer as EC2's eventually consistent reads do: from a
// moment in the recent past, for everything a Describe* call reports.
type history struct {
	worlds []world
}

// currentWorld is the state as it is.
func (c *Cloud) currentWorld() world {
	return world{volumes: c.st.Volumes, snapshots: c.st.Snapshots, modifications: c.st.Modifications}
}

// recordLocked adds the state at now to the history when stale reads are
// on and the state changed (or the history is empty: called before a
// change, that keeps the state before it), and forgets the states no stale
// read can reach any more. Without stale reads it keeps nothing, so it
// costs nothing.
func (c *Cloud) recordLocked(now time.Time) {
	window := time.Duration(0)
	if c.cfg.StaleWindow != nil {
		window = c.cfg.StaleWindow()
	}
	if window <= 0 {
		c.past.worlds = nil
		return
	}
	if c.dirty || len(c.past.worlds) == 0 {
		w := world{
			at:            now,
			volumes:       make(map[string]*Volume, len(c.st.Volumes)),
			snapshots:     make(map[string]*Snapshot, len(c.st.Snapshots)),
			modifications: make(map[string]*Modification, len(c.st.Modifications)),
		}
		for id, v := range c.st.Volumes {
			cv := cloneVolume(v)
			w.volumes[id] = &cv
		}
		for id, s := range c.st.Snapshots {
			cs := cloneSnapshot(s)
			w.snapshots[id] = &cs
		}
		for id, m := range c.st.Modifications {
			cm := *m
			w.modifications[id] = &cm
		}
		c.past.worlds = append(c.past.worlds, w)
	}
	c.forgetLocked(now, window)
}

// forgetLocked drops the past states older than the window, but the newest
// of them: it is what the cloud looked like at the window's start.
func (c *Cloud) forgetLocked(now time.Time, window time.Duration) {
	cut := now.Add(-window)
	drop := 0
	for drop+1 < len(c.past.worlds) && !c.past.worlds[drop+1].at.After(cut) {
		drop++
	}
	if drop > 0 {
		clear(c.past.worlds[:drop])
		c.past.worlds = c.past.worlds[drop:]
	}
}

// readWorld is the world a Describe* call with the given lag sees: the
// state as it was lag ago (as far back as the history reaches), or the
// current one without lag.
func (c *Cloud) readWorld(now time.Time, lag time.Duration) world {
	if lag <= 0 || len(c.past.worlds) == 0 || c.cfg.StaleWindow == nil {
		return c.currentWorld()
	}
	c.forgetLocked(now, c.cfg.StaleWindow())
	at := now.Add(-lag)
	for i := len(c.past.worlds) - 1; i >= 0; i-- {
		if !c.past.worlds[i].at.After(at) {
			return c.past.worlds[i]
		}
	}
	return c.past.worlds[0]
}

// Audit is what the cloud saw happen that its state does not keep, for a
// test to check afterwards (GET /audit on the admin listener).
type Audit struct {
	// SharedVolumes are the volumes that were ever attached (or attaching)
	// to more than one instance at once, with the most instances at once.
	// Only multi-attach volumes can be; a driver that serves a volume to
	// one node at a time must never make one appear here.
	SharedVolumes map[string]int `json:"sharedVolumes"`
}

// Audit returns what the cloud has seen since it started.
func (c *Cloud) Audit() Audit {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Audit{SharedVolumes: map[string]int{}}
	for id, n := range c.audit.SharedVolumes {
		out.SharedVolumes[id] = n
	}
	return out
}

// auditAttachmentsLocked records a volume that now has attachments to more
// than one instance.
func (c *Cloud) auditAttachmentsLocked(v *Volume) {
	n := 0
	for _, a := range v.Attachments {
		if a.State != AttachmentDetached {
			n++
		}
	}
	if n < 2 {
		return
	}
	if c.audit.SharedVolumes == nil {
		c.audit.SharedVolumes = map[string]int{}
	}
	c.audit.SharedVolumes[v.ID] = max(c.audit.SharedVolumes[v.ID], n)
}
