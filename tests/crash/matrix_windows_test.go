package crash

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/diskplane/diskplane/pkg/cloud/metadata"
	"github.com/diskplane/diskplane/pkg/csiproxy"
	"github.com/diskplane/diskplane/pkg/driver/node"
	"github.com/diskplane/diskplane/pkg/emulator/winhost"
	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/pkg/testutil"
)

const (
	gib      = int64(1) << 30
	bootID   = "vol-0b0000000000000b0"
	stateDir = `c:\var\lib\kubelet\plugins\ebs.csi.diskplane.io`
)

// winOp is a Windows node operation (NTFS through csi-proxy).
type winOp int

const (
	winStageNew winOp = iota
	// winStageNewLate is winStageNew on a host whose new partitions'
	// volumes arrive two listings late, as Windows' mount manager
	// announces them a moment after the partition.
	winStageNewLate
	winStageGrown
	winExpandOnline
	winUnstage
)

func (o winOp) String() string {
	return map[winOp]string{
		winStageNew:     "stage and publish a new volume: NTFS",
		winStageNewLate: "stage and publish a new volume whose new partition's volume arrives late: NTFS",
		winStageGrown:   "expand offline: stage and publish a volume grown while detached: NTFS",
		winExpandOnline: "expand online: NTFS",
		winUnstage:      "unpublish and unstage: NTFS",
	}[o]
}

// winHarness is one emulated Windows host with the node plugin over it, as
// a HostProcess pod runs it (the csi-proxy v2 library in process), with a
// stepHost in between.
type winHarness struct {
	t     *testing.T
	host  *winhost.Host
	src   *winhost.StaticSource
	lib   csiproxy.Host
	steps *stepHost
	svc   *node.Service
	n     int // volumes made, for their IDs
}

// winVolume is one volume with the kubelet's paths for it, and what the
// node made of it.
type winVolume struct {
	id, staging, target string
	size                int64
	// ntfs is the Windows volume that holds its filesystem once staged, and
	// formats how often it was formatted then: what must never change.
	ntfs    string
	formats int
	// grownFrom is the volume's size before its disk grew.
	grownFrom int64
}

// TestWindowsCrashConsistency is TestCrashConsistency's Windows half, run
// under Wine (make test-windows).
func TestWindowsCrashConsistency(t *testing.T) {
	prof := profile()
	var tables []*table
	for _, o := range []winOp{winStageNew, winStageNewLate, winStageGrown, winExpandOnline, winUnstage} {
		w := newWinHarness(t)
		tables = append(tables, w.operation(o, prof))
	}
	report(t, "windows", tables)
}

func newWinHarness(t *testing.T) *winHarness {
	t.Helper()
	src := &winhost.StaticSource{}
	src.Attach(winhost.Attached{VolumeID: bootID, SizeBytes: 30 * gib, Boot: true})
	h, err := winhost.New(winhost.Config{Source: src, Root: testutil.TempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	lib, err := csiproxy.NewLibrary(context.Background(), h.HostAPIs())
	if err != nil {
		t.Fatal(err)
	}
	w := &winHarness{t: t, host: h, src: src, lib: lib}
	w.restart()
	return w
}

// restart is a new plugin over the same host.
func (w *winHarness) restart() {
	w.steps = &stepHost{host: w.lib}
	m, err := mounter.New(mounter.Options{CSIProxy: w.steps, StateDir: stateDir})
	if err != nil {
		w.t.Fatal(err)
	}
	svc, err := node.New(node.Config{Mounter: m, Metadata: func(context.Context) (*metadata.Instance, error) {
		return &metadata.Instance{ID: "i-0c0ffee0c0ffee000", Type: "m5.large", Region: "us-east-1", Zone: "us-east-1a"}, nil
	}})
	if err != nil {
		w.t.Fatal(err)
	}
	w.svc = svc
}

// newVolume attaches a new volume of size bytes.
func (w *winHarness) newVolume(size int64) *winVolume {
	v := w.nextVolume(size)
	w.src.Attach(winhost.Attached{VolumeID: v.id, SizeBytes: size})
	return v
}

// nextVolume names a volume of size bytes, not attached yet.
func (w *winHarness) nextVolume(size int64) *winVolume {
	w.n++
	v := &winVolume{id: fmt.Sprintf("vol-0a%015x", w.n), size: size}
	v.staging = `c:\var\lib\kubelet\plugins\kubernetes.io\csi\ebs.csi.diskplane.io\` + v.id + `\globalmount`
	v.target = `c:\var\lib\kubelet\pods\pod-` + v.id + `\volumes\kubernetes.io~csi\pv\mount`
	return v
}

func (w *winHarness) grow(v *winVolume) {
	v.size += gib
	w.src.Attach(winhost.Attached{VolumeID: v.id, SizeBytes: v.size})
}

var ntfsCapability = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ntfs"}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

func (w *winHarness) stageAll(v *winVolume) error {
	ctx := context.Background()
	if _, err := w.svc.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging,
		VolumeCapability: ntfsCapability}); err != nil {
		return prefix("NodeStageVolume", err)
	}
	_, err := w.svc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging,
		TargetPath: v.target, VolumeCapability: ntfsCapability})
	return prefix("NodePublishVolume", err)
}

func (w *winHarness) unstageAll(v *winVolume) error {
	ctx := context.Background()
	if _, err := w.svc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target}); err != nil {
		return prefix("NodeUnpublishVolume", err)
	}
	_, err := w.svc.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging})
	return prefix("NodeUnstageVolume", err)
}

func (w *winHarness) expand(v *winVolume) error {
	_, err := w.svc.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: v.id, VolumePath: v.target,
		StagingTargetPath: v.staging, VolumeCapability: ntfsCapability, CapacityRange: &csi.CapacityRange{RequiredBytes: v.size}})
	return prefix("NodeExpandVolume", err)
}

func prefix(rpc string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", rpc, err)
	}
	return nil
}

// view is what the host shows of v's disk.
func (w *winHarness) view(v *winVolume) winhost.DiskView {
	disks, err := w.host.Disks()
	if err != nil {
		w.t.Fatal(err)
	}
	for _, d := range disks {
		if d.VolumeID == v.id {
			return d
		}
	}
	w.t.Fatalf("the host has never seen %s", v.id)
	return winhost.DiskView{}
}

// staged returns the Windows volume mounted at v's staging path, and how
// often it was formatted; "" when none is.
func (w *winHarness) staged(v *winVolume) (string, int) {
	d := w.view(v)
	for _, p := range d.Partitions {
		if p.Volume != nil && slices.ContainsFunc(d.MountPoints[p.Volume.ID], func(mp string) bool { return strings.EqualFold(mp, v.staging) }) {
			return p.Volume.ID, p.Volume.Formats
		}
	}
	return "", 0
}

// setup attaches a new volume in the state o starts from.
func (w *winHarness) setup(o winOp) *winVolume {
	v := w.newVolume(2 * gib)
	switch o {
	case winStageNewLate:
		w.host.DelayNewVolumes(2)
		fallthrough
	case winStageNew:
		return v
	}
	if err := w.stageAll(v); err != nil {
		w.t.Fatalf("%s: set up: %v", o, err)
	}
	v.ntfs, v.formats = w.staged(v)
	if o == winStageGrown || o == winExpandOnline {
		total, _, err := w.lib.VolumeStats(context.Background(), v.ntfs)
		if err != nil {
			w.t.Fatal(err)
		}
		v.grownFrom = total
	}
	if o == winStageGrown {
		if err := w.unstageAll(v); err != nil {
			w.t.Fatalf("%s: set up: %v", o, err)
		}
	}
	if o == winStageGrown || o == winExpandOnline {
		w.grow(v)
	}
	return v
}

func (w *winHarness) run(o winOp, v *winVolume) error {
	switch o {
	case winExpandOnline:
		return w.expand(v)
	case winUnstage:
		return w.unstageAll(v)
	}
	return w.stageAll(v)
}

// recoverFresh is recoverFresh of the Linux harness: what the kubelet does
// with a volume the node sees afresh.
func (w *winHarness) recoverFresh(o winOp, v *winVolume) error {
	switch o {
	case winUnstage:
		return nil
	case winExpandOnline:
		if err := w.stageAll(v); err != nil {
			return err
		}
		return w.expand(v)
	}
	return w.stageAll(v)
}

// verify checks a recovered volume: the operation's end state; the same
// NTFS volume as before, never formatted again (in the emulated host,
// whose disks keep no file contents, a format or a new partition is how
// data is lost); the growth asked for; and, with fresh, the same after
// unstaging and staging it again.
func (w *winHarness) verify(o winOp, v *winVolume, fresh bool) error {
	ntfs, formats := w.staged(v)
	switch {
	case o == winUnstage && ntfs != "":
		return errors.New("the volume is still staged after unstaging completed")
	case o != winUnstage && ntfs == "":
		return errors.New("the volume is not staged after the operation completed")
	}
	if o == winUnstage || fresh {
		if o != winUnstage {
			if err := w.unstageAll(v); err != nil {
				return fmt.Errorf("unstage before a fresh open: %w", err)
			}
		}
		if err := w.stageAll(v); err != nil {
			return fmt.Errorf("stage again: %w", err)
		}
		ntfs, formats = w.staged(v)
	}
	if symlink, err := w.lib.IsSymlink(context.Background(), v.target); err != nil || !symlink {
		return fmt.Errorf("the volume is not published at its target (%v)", err)
	}
	switch {
	case v.ntfs == "" && formats != 1:
		return fmt.Errorf("the new volume was formatted %d times", formats)
	case v.ntfs != "" && (ntfs != v.ntfs || formats != v.formats):
		return fmt.Errorf("data lost: the staged volume is %s formatted %d times, was %s formatted %d times", ntfs, formats, v.ntfs, v.formats)
	}
	if v.grownFrom > 0 {
		total, _, err := w.lib.VolumeStats(context.Background(), ntfs)
		if err != nil {
			return err
		}
		if total < v.grownFrom+gib/2 {
			return fmt.Errorf("the volume did not grow: %d bytes, %d before its disk grew by 1 GiB", total, v.grownFrom)
		}
	}
	return nil
}

// operation is operation of the Linux harness for Windows: steps learnt
// from an uninterrupted run, then the profile's runs at each.
func (w *winHarness) operation(o winOp, prof string) *table {
	v := w.setup(o)
	w.steps.arm(interruption{})
	if err := w.run(o, v); err != nil {
		w.t.Fatalf("%s, uninterrupted: %v", o, err)
	}
	baseline := normaliseWin(w.steps.steps(), v)
	if err := w.verify(o, v, true); err != nil {
		w.t.Fatalf("%s, uninterrupted: %v", o, err)
	}
	w.detach(v)
	tb := newTable(o.String(), baseline)
	for at := 1; at <= len(baseline); at++ {
		for _, r := range runsAt(prof, at, len(baseline)) {
			for c, out := range w.interrupted(o, baseline, r, prof == "full") {
				tb.set(at, c, out)
			}
		}
	}
	return tb
}

// interrupted runs r on a fresh volume and returns the outcome of each of
// its recoveries.
func (w *winHarness) interrupted(o winOp, baseline []string, r run, fresh bool) map[column]outcome {
	out := map[column]outcome{}
	v := w.setup(o)
	w.steps.arm(interruption{At: r.at, Mode: r.mode})
	_ = w.run(o, v) // its answer is whatever the interruption made it
	steps := normaliseWin(w.steps.steps(), v)
	if len(steps) < r.at || !slices.Equal(steps[:r.at], baseline[:r.at]) {
		for _, p := range append([]string{r.live}, r.copies...) {
			if p != "" {
				out[column{r.mode, p}] = outcome(fmt.Sprintf("the run took another path than the uninterrupted one: %q", steps))
			}
		}
		return out
	}
	if r.mode != modeFail && !w.steps.killed() {
		w.t.Fatalf("%s: the plugin was not killed at step %d", o, r.at)
	}
	w.steps.arm(interruption{})
	var snapshot *winVolume
	if slices.Contains(r.copies, pathSnapshot) {
		snapshot = w.nextVolume(v.size)
		if err := w.host.CopyDisk(v.id, snapshot.id); err != nil {
			w.t.Fatal(err)
		}
		w.src.Attach(winhost.Attached{VolumeID: snapshot.id, SizeBytes: snapshot.size})
		snapshot.grownFrom = v.grownFrom
		if v.ntfs != "" {
			// The copy's volume has an ID of its own (winhost.CopyDisk).
			for _, p := range w.view(snapshot).Partitions {
				if p.Volume != nil && p.Volume.FileSystem != "" {
					snapshot.ntfs, snapshot.formats = p.Volume.ID, p.Volume.Formats
				}
			}
		}
	}
	switch r.live {
	case pathRestart:
		w.restart()
		fallthrough
	case pathRetry:
		out[column{r.mode, r.live}] = w.outcome(o, v, fresh, w.run(o, v))
	}
	for _, p := range r.copies {
		switch p {
		case pathReboot:
			if err := w.host.Reboot(); err != nil {
				w.t.Fatal(err)
			}
			w.restart()
			err := w.recoverFresh(o, v)
			if o == winUnstage && err == nil {
				// Windows keeps volume mount points over a reboot: the
				// kubelet finds the staging path of a pod that is gone
				// still mounted, and unstages it.
				err = w.unstageAll(v)
			}
			out[column{r.mode, p}] = w.outcome(o, v, fresh, err)
		case pathSnapshot:
			if w.steps.killed() {
				w.restart()
			}
			err := w.recoverFresh(o, snapshot)
			out[column{r.mode, p}] = w.snapshotOutcome(o, snapshot, fresh, err)
		}
	}
	w.detach(v)
	if snapshot != nil {
		w.detach(snapshot)
	}
	return out
}

// detach unstages v as far as it goes and detaches it, so that the next
// volumes get its disk number, as Windows hands out the lowest free one.
func (w *winHarness) detach(v *winVolume) {
	w.host.DelayNewVolumes(0)
	if w.steps.killed() {
		w.restart()
	}
	w.steps.arm(interruption{})
	_ = w.unstageAll(v)
	w.src.Detach(v.id)
}

func (w *winHarness) outcome(o winOp, v *winVolume, fresh bool, err error) outcome {
	if err == nil {
		err = w.verify(o, v, fresh)
	}
	if err != nil {
		return outcome(err.Error())
	}
	return ok
}

// snapshotOutcome is outcome for a copy of the disk staged as a new
// volume. A copy of a partition made and not yet formatted carries no
// record that Diskplane made it (the record is the source node's): refusing
// it with the command that clears it is what must happen.
func (w *winHarness) snapshotOutcome(o winOp, v *winVolume, fresh bool, err error) outcome {
	if err != nil && v.ntfs == "" && strings.Contains(err.Error(), "Clear-Disk") && w.unformattedPartition(v) {
		return refusedClearDisk
	}
	return w.outcome(o, v, fresh, err)
}

// unformattedPartition reports whether v's disk holds one partition whose
// volume has no filesystem.
func (w *winHarness) unformattedPartition(v *winVolume) bool {
	var volumes []*winhost.Volume
	for _, p := range w.view(v).Partitions {
		if p.Volume != nil {
			volumes = append(volumes, p.Volume)
		}
	}
	return len(volumes) == 1 && volumes[0].FileSystem == ""
}

var (
	windowsVolumeID = regexp.MustCompile(`\\\\\?\\Volume\{[^}]*\}\\`)
	diskArgument    = regexp.MustCompile(`^(\w+) [0-9]+`)
)

// normaliseWin writes steps without what differs from one volume to the
// next: its disk number, Windows volume ID and paths.
func normaliseWin(steps []string, v *winVolume) []string {
	r := strings.NewReplacer(v.staging, "<staging>", v.target, "<target>", stateDir, "<state>", v.id, "<volume>")
	out := make([]string, len(steps))
	for i, s := range steps {
		s = r.Replace(s)
		s = windowsVolumeID.ReplaceAllString(s, "<ntfs>")
		switch {
		case strings.HasPrefix(s, "ReadDisk") && !strings.HasSuffix(s, " 0"):
			s = diskArgument.ReplaceAllString(s, "$1 <disk>")
			s = s[:strings.LastIndex(s, " ")] + " <end>"
		default:
			s = diskArgument.ReplaceAllString(s, "$1 <disk>")
		}
		out[i] = s
	}
	return out
}
