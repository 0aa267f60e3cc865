//go:build linux

package crash

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/mounter/mountertest"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// harness is one node: its volumes, the shims and the plugin process.
type harness struct {
	t       *testing.T
	dir     string // volumes/ and the kubelet's paths
	linkDir string
	shims   *shims
	plugin  *plugin // nil while none runs
	log     *os.File
}

// TestCrashConsistency interrupts every node operation at every step and
// recovers it (doc.go), on real loop devices, dm-crypt and filesystems.
// An operation whose kernel features this machine lacks (device-mapper,
// growing a mounted ext4) skips, loudly; the node VM has them all (make
// test-vm, where DISKPLANE_CRASH_OPERATIONS=kernel runs only those, the
// others having run in make test). Operations run in parallel, one node
// plugin each, as many at once as -test.parallel allows (the CPUs).
func TestCrashConsistency(t *testing.T) {
	testutil.RequireRoot(t, "losetup", "cryptsetup", "mkfs.ext4", "mkfs.xfs", "blkid", "resize2fs", "xfs_growfs")
	prof := profile()
	selected, err := selectOperations()
	if err != nil {
		t.Fatal(err)
	}
	tables := make([]*table, len(selected))
	t.Run("operations", func(t *testing.T) {
		for i, o := range selected {
			t.Run(o.String(), func(t *testing.T) {
				if o.layout.encrypted {
					testutil.RequireKernelFeature(t, testutil.HasDeviceMapper(), "LUKS2 volumes need device-mapper (dm-crypt), which this kernel lacks")
				}
				if o.growsMountedExt4() {
					mountertest.RequireExt4OnlineResize(t)
				}
				t.Parallel()
				started := time.Now()
				h := newHarness(t)
				tables[i] = h.operation(o, prof)
				t.Logf("%d steps in %s\n%s", len(tables[i].steps), time.Since(started).Round(time.Second), tables[i].markdown())
			})
		}
	})
	name := "linux"
	if os.Getenv("DISKPLANE_CRASH_OPERATIONS") == "kernel" {
		name = "linux-kernel"
	}
	report(t, name, slices.DeleteFunc(tables, func(tb *table) bool { return tb == nil }))
}

// newHarness makes a node of its own for one test: a private directory
// for its volumes, the kubelet's paths and the plugin's socket (under /tmp,
// to keep the socket's path short), the shims, and a running plugin whose
// log goes to $DISKPLANE_CRASH_REPORT when set.
func newHarness(t *testing.T) *harness {
	root, err := os.MkdirTemp("", "crash")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	logDir := cmp.Or(os.Getenv("DISKPLANE_CRASH_REPORT"), t.TempDir())
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := strings.NewReplacer("/", "-", " ", "_", ",", "", ":", "", "(", "", ")", "").Replace(t.Name())
	log, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	h := &harness{t: t, dir: root, linkDir: filepath.Join(root, "by-id"), shims: newShims(t, root), log: log}
	t.Cleanup(func() {
		if h.plugin != nil {
			h.plugin.kill(t)
		}
	})
	h.restartPlugin()
	return h
}

// selectOperations are the operations, those whose name matches
// $DISKPLANE_CRASH_ONLY (a regular expression) when it is set, and only
// those that need a node's kernel when $DISKPLANE_CRASH_OPERATIONS is
// "kernel".
func selectOperations() ([]operation, error) {
	only := regexp.MustCompile("")
	if expr := os.Getenv("DISKPLANE_CRASH_ONLY"); expr != "" {
		var err error
		if only, err = regexp.Compile(expr); err != nil {
			return nil, fmt.Errorf("DISKPLANE_CRASH_ONLY: %w", err)
		}
	}
	kernelOnly := os.Getenv("DISKPLANE_CRASH_OPERATIONS") == "kernel"
	var out []operation
	for _, o := range operations {
		if only.MatchString(o.String()) && (!kernelOnly || o.needsKernel()) {
			out = append(out, o)
		}
	}
	return out, nil
}

// operation runs o uninterrupted to learn its steps, then every run of the
// profile at each of them.
func (h *harness) operation(o operation, prof string) *table {
	st := h.golden(o)
	if st.file != "" {
		defer os.Remove(st.file)
	}
	baseline, label := h.baseline(o, st)
	labels := make([]string, len(baseline))
	for i, s := range baseline {
		labels[i] = stepLabel(s)
	}
	tb := newTable(o.String(), labels)
	for at := 1; at <= len(baseline); at++ {
		for _, r := range runsAt(prof, at, len(baseline)) {
			for c, out := range h.interrupted(o, st, baseline, label, r, prof == "full") {
				tb.set(at, c, out)
			}
		}
	}
	if len(baseline) == 0 {
		h.t.Errorf("%s: no step was seen: the shims are not in the plugin's way", o)
	}
	return tb
}

// newVolume makes a blank volume of l, with the kubelet's paths for it.
func (h *harness) newVolume(l layout) *volume {
	id := mountertest.NewVolumeID(h.t)
	v := &volume{Volume: mountertest.NewVolume(h.t, h.dir, h.linkDir, id, l.size()), layout: l}
	h.kubeletPaths(v)
	return v
}

// attach attaches the volume file of id (a copy) with l.
func (h *harness) attach(id string, l layout, grownFrom int64) *volume {
	v := &volume{Volume: mountertest.AttachVolume(h.t, h.dir, h.linkDir, id), layout: l, grownFrom: grownFrom}
	h.kubeletPaths(v)
	return v
}

func (h *harness) kubeletPaths(v *volume) {
	v.staging = filepath.Join(h.dir, "kubelet/plugins/kubernetes.io/csi/ebs.csi.diskplane.io", v.ID, "globalmount")
	if v.layout.fsType == "" {
		v.target = filepath.Join(h.dir, "kubelet/pods/pod-"+v.ID, "volumeDevices/kubernetes.io~csi/pv")
	} else {
		v.target = filepath.Join(h.dir, "kubelet/pods/pod-"+v.ID, "volumes/kubernetes.io~csi/pv/mount")
	}
}

// restartPlugin kills the plugin if it runs and starts it again.
func (h *harness) restartPlugin() {
	if h.plugin != nil {
		h.plugin.kill(h.t)
	}
	h.plugin = startPlugin(h.t, h.shims, h.dir, h.linkDir, h.log)
}

// baseline runs o through, checks the result like any recovery and
// returns its steps, normalised, and the label of the LUKS header it left.
func (h *harness) baseline(o operation, st *start) ([]string, string) {
	t := h.t
	v := h.setup(o, st)
	defer release(t, v)
	h.shims.arm(t, interruption{})
	err := h.run(o, v)
	steps := normalise(h.shims.steps(t), v)
	if err != nil {
		t.Fatalf("%s, uninterrupted: %v (plugin log %s)", o, err, h.log.Name())
	}
	label := headerLabel(v)
	if err := h.verify(o, v, st.data, label, true); err != nil {
		t.Fatalf("%s, uninterrupted: %v", o, err)
	}
	return steps, label
}

// interrupted runs r and returns the outcome of each of its recoveries.
func (h *harness) interrupted(o operation, st *start, baseline []string, label string, r run, fresh bool) map[column]outcome {
	t := h.t
	out := map[column]outcome{}
	v := h.setup(o, st)
	h.shims.arm(t, interruption{At: r.at, Mode: r.mode})
	first := h.run(o, v)
	steps := normalise(h.shims.steps(t), v)
	h.shims.arm(t, interruption{})
	if r.mode != modeFail {
		if !h.plugin.dead(30 * time.Second) {
			t.Fatalf("%s: the plugin was not killed at step %d (%v)", o, r.at, first)
		}
		h.plugin = nil
	}
	if len(steps) < r.at || !slices.Equal(steps[:r.at], baseline[:r.at]) {
		o := outcome(fmt.Sprintf("the run took another path than the uninterrupted one: %q", steps))
		for _, p := range append([]string{r.live}, r.copies...) {
			if p != "" {
				out[column{r.mode, p}] = o
			}
		}
		release(t, v)
		return out
	}
	// The copies are taken now, at the moment of the interruption.
	copies := map[string]string{}
	for _, p := range r.copies {
		id := mountertest.NewVolumeID(t)
		mountertest.CopyVolume(t, v.Volume, h.dir, id)
		copies[p] = id
	}
	switch r.live {
	case pathRestart:
		h.restartPlugin()
		fallthrough
	case pathRetry:
		out[column{r.mode, r.live}] = h.outcome(o, v, st.data, label, fresh, h.run(o, v))
	}
	release(t, v)
	for _, p := range r.copies {
		id := copies[p]
		if p == pathReboot {
			// The same volume after the node restarted: its bytes as they
			// were at the interruption, nothing of it open or mounted.
			if err := os.Rename(filepath.Join(h.dir, "volumes", id+".img"), v.File); err != nil {
				t.Fatal(err)
			}
			id = v.ID
			h.restartPlugin()
		} else if h.plugin == nil {
			h.restartPlugin() // killed, and nothing started it again yet
		}
		c := h.attach(id, o.layout, v.grownFrom)
		out[column{r.mode, p}] = h.outcome(o, c, st.data, label, fresh, h.recoverFresh(o, c))
		release(t, c)
		_ = os.Remove(c.File)
	}
	_ = os.Remove(v.File)
	return out
}

// outcome verifies a recovery whose calls answered err.
func (h *harness) outcome(o operation, v *volume, data []payload, label string, fresh bool, err error) outcome {
	if err == nil {
		err = h.verify(o, v, data, label, fresh)
	}
	if err != nil {
		return outcome(err.Error())
	}
	return ok
}

var (
	dmDevice   = regexp.MustCompile(`/dev/dm-[0-9]+`)
	loopDevice = regexp.MustCompile(`/dev/loop[0-9]+`)
)

// normalise writes the steps of one volume without what differs from one
// volume to the next: its devices, paths and ID become placeholders.
func normalise(steps []string, v *volume) []string {
	r := strings.NewReplacer(v.mapping(), "<mapping>", v.staging, "<staging>", v.target, "<target>", v.File, "<file>", v.ID, "<volume>")
	out := make([]string, len(steps))
	for i, s := range steps {
		s = r.Replace(s)
		s = dmDevice.ReplaceAllString(s, "<mapping>")
		out[i] = loopDevice.ReplaceAllString(s, "<device>")
	}
	return out
}

// notable are the arguments a step's label keeps besides the program, a
// cryptsetup action and the placeholders.
var notable = map[string]bool{"--test-passphrase": true, "--label": true, "--getro": true, "--getsize64": true}

// stepLabel is a step's command line cut to what tells it apart: the
// program, cryptsetup's action, notable flags and the placeholders.
func stepLabel(step string) string {
	fields := strings.Fields(step)
	if len(fields) < 2 {
		return step
	}
	label := []string{fields[0]}
	rest := fields[1:]
	if fields[0] == "cryptsetup" {
		label, rest = append(label, fields[1]), fields[2:]
	}
	for _, f := range rest {
		switch {
		case notable[f], strings.Contains(f, "<"):
			label = append(label, f)
		case fields[0] == "mount" && strings.Contains(f, "bind"):
			label = append(label, "bind")
			if strings.Contains(f, "remount") {
				label = append(label, "remount")
			}
		}
	}
	return strings.Join(label, " ")
}
