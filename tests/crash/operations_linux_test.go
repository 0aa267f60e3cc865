//go:build linux

package crash

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/diskplane/diskplane/pkg/mounter/mountertest"
)

// opKind is which node operation is interrupted.
type opKind int

const (
	// stageNew stages and publishes a new, blank volume: format and mount.
	stageNew opKind = iota
	// stageGrown stages and publishes a volume that grew while it was
	// detached: the offline expansion.
	stageGrown
	// expandOnline grows a published volume (NodeExpandVolume).
	expandOnline
	// unstage unpublishes and unstages a published volume.
	unstage
)

// operation is a row group of the table.
type operation struct {
	kind   opKind
	layout layout
}

func (o operation) String() string {
	name := map[opKind]string{
		stageNew:     "stage and publish a new volume",
		stageGrown:   "expand offline: stage and publish a volume grown while detached",
		expandOnline: "expand online",
		unstage:      "unpublish and unstage",
	}[o.kind]
	return name + ": " + o.layout.String()
}

// operations are the operations the harness interrupts: staging (with
// publishing, where a volume whose key KMS wraps is opened) each kind of
// volume, expanding online and offline, plain and LUKS2, and unstaging.
// Staging a plain block volume has no step (publishing binds the device).
// Staging a volume that holds data is the offline expansion without its
// growth steps.
var operations = []operation{
	{kind: stageNew, layout: layout{fsType: "ext4"}},
	{kind: stageNew, layout: layout{fsType: "xfs"}},
	{kind: stageNew, layout: layout{fsType: "ext4", encrypted: true}},
	{kind: stageNew, layout: layout{encrypted: true}},
	{kind: stageNew, layout: layout{fsType: "xfs", encrypted: true, kms: true}},
	{kind: stageGrown, layout: layout{fsType: "xfs"}},
	{kind: stageGrown, layout: layout{fsType: "ext4", encrypted: true}},
	{kind: expandOnline, layout: layout{fsType: "ext4"}},
	{kind: expandOnline, layout: layout{fsType: "ext4", encrypted: true}},
	{kind: unstage, layout: layout{fsType: "ext4"}},
	{kind: unstage, layout: layout{fsType: "ext4", encrypted: true}},
	{kind: unstage, layout: layout{fsType: "xfs", encrypted: true, kms: true}},
}

// needsKernel reports whether o needs kernel features that a development
// machine may lack and a node has (device-mapper, growing a mounted ext4).
func (o operation) needsKernel() bool { return o.layout.encrypted || o.growsMountedExt4() }

// growsMountedExt4 reports whether o grows a mounted ext4 filesystem, which
// takes CAP_SYS_RESOURCE.
func (o operation) growsMountedExt4() bool {
	return o.layout.fsType == "ext4" && (o.kind == expandOnline || o.kind == stageGrown)
}

// golden makes, once per operation, a volume in the state the operation
// starts from (less what the node holds open): staged, written to and
// unstaged again, grown for an offline expansion. Each interrupted run
// starts from a copy of it. A new volume's operation has none.
func (h *harness) golden(o operation) *start {
	if o.kind == stageNew {
		return &start{}
	}
	v := h.newVolume(o.layout)
	defer release(h.t, v)
	d0 := newPayload("before", 4*mib)
	st := &start{data: []payload{d0}}
	if err := h.stageAll(v); err != nil {
		h.t.Fatalf("%s: set up: %v", o, err)
	}
	if err := write(v, d0); err != nil {
		h.t.Fatalf("%s: set up: %v", o, err)
	}
	if o.kind == stageGrown || o.kind == expandOnline {
		size, err := capacity(v)
		if err != nil {
			h.t.Fatal(err)
		}
		st.grownFrom = size
	}
	if err := h.unstageAll(v); err != nil {
		h.t.Fatalf("%s: set up: %v", o, err)
	}
	if o.kind == stageGrown {
		grow(h.t, v)
	}
	st.file = v.File + ".golden"
	if err := os.Rename(v.File, st.file); err != nil {
		h.t.Fatal(err)
	}
	return st
}

// start is where an operation's runs start from.
type start struct {
	// file is the golden volume's bytes; "" for a new volume.
	file string
	// data is what the volume holds.
	data []payload
	// grownFrom is what a pod saw before the volume grew.
	grownFrom int64
}

// setup attaches a new volume in the state the operation starts from.
func (h *harness) setup(o operation, st *start) *volume {
	if st.file == "" {
		return h.newVolume(o.layout)
	}
	id := mountertest.NewVolumeID(h.t)
	if err := mountertest.CopySparse(st.file, filepath.Join(h.dir, "volumes", id+".img")); err != nil {
		h.t.Fatal(err)
	}
	v := h.attach(id, o.layout, st.grownFrom)
	if o.kind == expandOnline || o.kind == unstage {
		if err := h.stageAll(v); err != nil {
			h.t.Fatalf("%s: set up: %v", o, err)
		}
	}
	if o.kind == expandOnline {
		grow(h.t, v)
	}
	return v
}

// run is the operation under test.
func (h *harness) run(o operation, v *volume) error {
	switch o.kind {
	case expandOnline:
		return h.expand(v)
	case unstage:
		return h.unstageAll(v)
	}
	return h.stageAll(v)
}

// recoverFresh brings a volume that the node has just seen again (after a
// reboot, or a copy staged as a new volume) to where the operation was
// going, as the kubelet does: it stages and publishes the volume of a pod,
// and retries the expansion a claim still waits for.
func (h *harness) recoverFresh(o operation, v *volume) error {
	switch o.kind {
	case unstage:
		return nil // the pod is gone; the volume stays unstaged
	case expandOnline:
		if err := h.stageAll(v); err != nil {
			return err
		}
		return h.expand(v)
	}
	return h.stageAll(v)
}

// verify checks a recovered volume: the operation's end state, the
// growth an expansion asked for, the data written before, a LUKS header
// that reads as the uninterrupted run left it (label) — what decides how
// the next open treats the volume — and that more can be written. With
// fresh (the full profile) it then also opens the volume afresh (unstaged,
// the mapping closed, staged again) and reads everything back: where a
// half-finished preparation of a LUKS mapping used to wipe the filesystem.
func (h *harness) verify(o operation, v *volume, data []payload, label string, fresh bool) error {
	switch {
	case o.kind == unstage && (published(v) || isMountPoint(v.staging) || mappingOpen(v)):
		return errors.New("the volume is still staged or its mapping open after unstaging completed")
	case o.kind != unstage && !published(v):
		return errors.New("the volume is not published after the operation completed")
	case o.kind != unstage && v.layout.encrypted && !mappingOpen(v):
		return errors.New("the volume's LUKS mapping is not open after the operation completed")
	}
	if v.grownFrom > 0 {
		size, err := capacity(v)
		if err != nil {
			return err
		}
		if size < v.grownFrom+48*mib {
			return fmt.Errorf("the volume did not grow: %d bytes, %d before the device grew by 64 MiB", size, v.grownFrom)
		}
	}
	if got := headerLabel(v); got != label {
		return fmt.Errorf("the LUKS header is labelled %q, not %q as after an uninterrupted run: the next open would take it for another state", got, label)
	}
	if o.kind == unstage {
		if err := h.stageAll(v); err != nil {
			return fmt.Errorf("stage again: %w", err)
		}
	}
	after := newPayload("after", 12*mib)
	for _, p := range data {
		if err := check(v, p); err != nil {
			return err
		}
	}
	if err := write(v, after); err != nil {
		return fmt.Errorf("write after recovering: %w", err)
	}
	if !fresh {
		return nil
	}
	if err := h.unstageAll(v); err != nil {
		return fmt.Errorf("unstage before a fresh open: %w", err)
	}
	if mappingOpen(v) || isMountPoint(v.staging) {
		return errors.New("unstaging left the mapping open or the staging path mounted")
	}
	if err := h.stageAll(v); err != nil {
		return fmt.Errorf("fresh open: %w", err)
	}
	for _, p := range append(data, after) {
		if err := check(v, p); err != nil {
			return fmt.Errorf("after a fresh open: %w", err)
		}
	}
	return nil
}

// headerLabel is the label of v's LUKS header, "" when it has none.
func headerLabel(v *volume) string {
	if !v.layout.encrypted {
		return ""
	}
	out, _ := exec.Command("blkid", "-p", "-o", "value", "-s", "LABEL", v.Device).Output()
	return strings.TrimSpace(string(out))
}

// capacity is what a pod sees of v: its filesystem's size, or its block
// device's.
func capacity(v *volume) (int64, error) {
	if v.layout.fsType != "" {
		var st unix.Statfs_t
		if err := unix.Statfs(v.target, &st); err != nil {
			return 0, err
		}
		return int64(st.Blocks) * st.Bsize, nil
	}
	f, err := os.Open(v.target)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Seek(0, 2)
}
