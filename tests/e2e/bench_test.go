//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/pkg/testutil"
	"github.com/diskplane/diskplane/tests/bench"
)

// The environment make bench (hack/bench/run.sh) sets for
// TestProvisionToRunning; without it the test is skipped: it is a
// benchmark, not a check.
const (
	benchPodsEnv = "DISKPLANE_BENCH_PODS" // how many claims with pods
	benchDirEnv  = "DISKPLANE_BENCH_DIR"  // where its figures go (p3.json)
)

// TestProvisionToRunning creates claims of examples/dynamic-provisioning's
// class, each with a pod, all at once, and measures for each the time from
// the claim's creation to its pod Running: what a user waits for. The floor
// is EC2's create and attach latencies plus a mkfs and mount on this
// machine. As many claims as the node can attach at once are used, up to
// the number asked for.
func TestProvisionToRunning(t *testing.T) {
	asked, err := strconv.Atoi(os.Getenv(benchPodsEnv))
	if err != nil || asked < 1 {
		t.Skipf("a benchmark: make bench runs it (%s unset)", benchPodsEnv)
	}
	out := os.Getenv(benchDirEnv)
	sc := newScenario(t)
	pods := min(asked, nodeAttachable(t)-1)
	m := sc.example("dynamic-provisioning")
	class, claim, pod := m.get(t, "StorageClass"), m.get(t, "PersistentVolumeClaim"), m.get(t, "Pod")
	sc.create(class)

	// Each claim's clock starts as it is created; creating them one after
	// another takes a few milliseconds each.
	started := make([]time.Time, pods)
	for i := range pods {
		c, p := claim.DeepCopy(), pod.DeepCopy()
		c.SetName(fmt.Sprintf("bench-%d", i))
		p.SetName(fmt.Sprintf("bench-%d", i))
		set(t, p, []any{map[string]any{"name": "data", "persistentVolumeClaim": map[string]any{"claimName": c.GetName()}}}, "spec", "volumes")
		started[i] = time.Now()
		sc.create(c, p)
	}

	running := make([]time.Duration, pods)
	sc.waitFor(fmt.Sprintf("%d pods Running", pods), 10*time.Minute, func(ctx context.Context) (bool, string, error) {
		list, err := env.client.CoreV1().Pods(sc.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		done := 0
		for _, p := range list.Items {
			var i int
			if _, err := fmt.Sscanf(p.Name, "bench-%d", &i); err != nil || i >= pods {
				continue
			}
			if running[i] == 0 && p.Status.Phase == corev1.PodRunning {
				running[i] = time.Since(started[i])
			}
			if running[i] != 0 {
				done++
			}
		}
		return done == pods, fmt.Sprintf("%d of %d Running", done, pods), nil
	})

	res := bench.ProvisionResult{Pods: pods, Asked: asked, ToRunning: running, FloorParts: floorParts(t)}
	for _, d := range res.FloorParts {
		res.Floor += d
	}
	if pods < asked {
		res.Note = fmt.Sprintf("the node attaches %d volumes at most, so %d claims instead of %d", pods+1, pods, asked)
	}
	slices.Sort(running)
	t.Logf("%d claims with pods: to Running p50 %s, p99 %s, floor %s", pods, running[len(running)/2], running[len(running)*99/100], res.Floor)
	if out != "" {
		data, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, "p3.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// nodeAttachable is how many of the driver's volumes the test node takes,
// as its CSINode says.
func nodeAttachable(t *testing.T) int {
	t.Helper()
	n, err := env.client.StorageV1().CSINodes().Get(t.Context(), env.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range n.Spec.Drivers {
		if d.Name == env.driverName && d.Allocatable != nil && d.Allocatable.Count != nil {
			return int(*d.Allocatable.Count)
		}
	}
	t.Fatalf("CSINode %s has no allocatable count for %s", env.node, env.driverName)
	return 0
}

// floorParts are the parts of the least time a claim can take to reach a
// running pod: the emulator's create and attach latencies (its defaults,
// as the e2e setup runs it), and a mkfs.ext4 and mount of a 4 GiB loop
// device on this machine, measured now.
func floorParts(t *testing.T) map[string]time.Duration {
	t.Helper()
	testutil.RequireRoot(t, "losetup", "mkfs.ext4", "mount")
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 4<<30); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		t.Fatal(err)
	}
	dev := string(out[:len(out)-1])
	defer func() { _ = exec.Command("losetup", "-d", dev).Run() }()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	for _, c := range [][]string{{"mkfs.ext4", "-q", "-m0", dev}, {"mount", dev, mnt}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
	mkfsMount := time.Since(started)
	_ = exec.Command("umount", mnt).Run()
	return map[string]time.Duration{"EC2 create": 2 * time.Second, "EC2 attach": 2 * time.Second, "mkfs and mount": mkfsMount}
}
