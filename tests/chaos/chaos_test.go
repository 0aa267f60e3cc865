//go:build chaos

// Package chaos runs volume lifecycles through the real controller process
// while everything that can go wrong does: the process is SIGKILLed at
// random moments (and started again, as the kubelet does), EC2 throttles,
// answers 5xx, applies requests and then loses their answers (500, 503, a
// reset connection, a stall past the caller's deadline), runs its clock
// three minutes behind, lags in its reads of everything, and fails some
// new volumes after accepting them. At the end it audits the
// emulator: no volume or snapshot that no successful request accounts for,
// no volume attached to two instances at once, no request that never
// completed. The build tag keeps it out of `make test`; `make chaos` runs
// the full profile, CI the reduced one (CHAOS_PROFILE=ci).
package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// profile sizes a run.
type profile struct {
	lifecycles int
	workers    int
	// minKills is the fewest SIGKILLs the run must see; kills come every
	// minGap to maxGap.
	minKills       int
	minGap, maxGap time.Duration
}

// profiles are the full run (make chaos) and CI's reduced one.
var profiles = map[string]profile{
	"full": {lifecycles: 300, workers: 24, minKills: 20, minGap: 4 * time.Second, maxGap: 10 * time.Second},
	"ci":   {lifecycles: 60, workers: 12, minKills: 5, minGap: 4 * time.Second, maxGap: 10 * time.Second},
}

// visibilityTimeout is the controller's --visibility-timeout: above the
// emulator's read lag (2 s, chaosFaults), and below most of the gaps
// between kills, since a controller waits that long after its start before
// it makes a snapshot whose name it cannot find (its predecessor may have
// made it a moment before it was killed).
const visibilityTimeout = 4 * time.Second

// chaosFaults are the faults of the run: throttling (EC2's token buckets,
// made ten times smaller so that a run this size feels them), 5 % plain 5xx
// answers, about 5 % of mutating requests applied and then failed, the
// clock three minutes behind, stale reads of up to 2 s for half of the
// Describe calls, and 1 % of new volumes failing.
func chaosFaults(seed uint64) faults.Config {
	return faults.Config{
		Seed: seed,
		Throttle: faults.Throttle{
			Enabled:            true,
			Mutating:           faults.Bucket{Size: 20, RefillPerSecond: 2},
			Describe:           faults.Bucket{Size: 10, RefillPerSecond: 8},
			UnfilteredDescribe: faults.Bucket{Size: 5, RefillPerSecond: 1},
		},
		Errors: []faults.ErrorRule{
			{Action: "*", Code: faults.CodeInternalError, Probability: 0.025},
			{Action: "*", Code: faults.CodeUnavailable, Probability: 0.025},
		},
		CommitThenFail: []faults.CommitFailRule{
			{Action: "*", Mode: faults.FailInternalError, Probability: 0.015},
			{Action: "*", Mode: faults.FailUnavailable, Probability: 0.01},
			{Action: "*", Mode: faults.FailReset, Probability: 0.015},
			{Action: "*", Mode: faults.FailStall, Probability: 0.01},
		},
		ClockSkew:  faults.Duration(-3 * time.Minute),
		StaleReads: faults.StaleReads{MaxLag: faults.Duration(2 * time.Second), Probability: 0.5},
		// Failed snapshots are left out: the controller reports one and
		// leaves it for the CO to delete by the ID it was answered, and one
		// whose answer was lost as well has no ID anywhere (see
		// tests/chaos/README.md).
		AsyncFailures: []faults.AsyncFailureRule{{Action: "CreateVolume", Probability: 0.01}},
	}
}

// latencies are EC2-like state changes, shortened.
var latencies = model.Latencies{
	VolumeCreate: 500 * time.Millisecond, VolumeDelete: 500 * time.Millisecond,
	Attach: 500 * time.Millisecond, Detach: 500 * time.Millisecond,
	Snapshot: time.Second, Modify: 500 * time.Millisecond, Optimize: time.Second,
}

// binary is the diskplane binary the run starts: DISKPLANE_BINARY, or one
// TestMain builds.
var binary string

func TestMain(m *testing.M) {
	binary = os.Getenv("DISKPLANE_BINARY")
	if binary == "" {
		dir, err := os.MkdirTemp("", "diskplane-chaos-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		binary = filepath.Join(dir, "diskplane")
		build := exec.Command("go", "build", "-o", binary, "github.com/diskplane/diskplane/cmd/diskplane")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build diskplane:", err)
			os.Exit(1)
		}
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func TestChaos(t *testing.T) {
	name := os.Getenv("CHAOS_PROFILE")
	if name == "" {
		name = "full"
	}
	p, ok := profiles[name]
	if !ok {
		t.Fatalf("CHAOS_PROFILE=%s: want full or ci", name)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED=%s: %v", s, err)
		}
	}
	t.Logf("profile %s: %d lifecycles by %d workers, at least %d kills; seed %d (CHAOS_SEED reruns it)", name, p.lifecycles, p.workers, p.minKills, seed)

	nodes := []model.InstanceSpec{{Type: "m5.large"}, {Type: "m5.large"}, {Type: "m6i.large"}, {Type: "m7i.large"}}
	env := emulatortest.Start(t, emulatortest.Options{InMemory: true, Instances: nodes, Latencies: latencies, Faults: chaosFaults(seed)})
	logDir := os.Getenv("CHAOS_LOG_DIR")
	if logDir == "" {
		logDir = t.TempDir()
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	environ := os.Environ()
	for k, v := range env.Environ() {
		environ = append(environ, k+"="+v)
	}
	ctrl := &controller{
		bin: binary, socket: filepath.Join(t.TempDir(), "csi.sock"), logDir: logDir, environ: environ,
		args: []string{"--visibility-timeout=" + visibilityTimeout.String(), "-v=2"},
	}
	ctrl.start(t)
	conn, err := grpc.NewClient("unix:"+ctrl.socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	rnd := newLockedRand(seed)
	sc := &sidecar{client: csi.NewControllerClient(conn), errs: &errorCounts{}, rand: rnd}
	var instances []string
	for _, in := range env.Cloud().Instances() {
		instances = append(instances, in.ID)
	}

	started := time.Now()
	killCtx, stopKilling := context.WithCancel(t.Context())
	kills := make(chan int, 1)
	go func() {
		n, err := ctrl.killAtRandom(killCtx, rnd, p.minGap, p.maxGap)
		if err != nil {
			t.Error(err)
		}
		kills <- n
	}()
	results := make([]result, p.lifecycles)
	work := make(chan int)
	var wg sync.WaitGroup
	var done atomic.Int64
	for range p.workers {
		wg.Go(func() {
			for n := range work {
				l := lifecycle{n: n, name: fmt.Sprintf("pvc-chaos-%04d", n), zone: env.Zone(),
					node: instances[n%len(instances)], other: instances[(n+1)%len(instances)],
					snapshot: n%2 == 0, modify: n%3 == 0 && n%5 != 1, multiAttach: n%5 == 1}
				results[n] = l.run(t.Context(), sc)
				done.Add(1)
			}
		})
	}
	go func() {
		for {
			select {
			case <-killCtx.Done():
				return
			case <-time.After(30 * time.Second):
				t.Logf("%s: %d of %d lifecycles done; steps under way: %v", time.Since(started).Round(time.Second), done.Load(), p.lifecycles, sc.steps())
			}
		}
	}()
	for n := range p.lifecycles {
		work <- n
	}
	close(work)
	wg.Wait()
	stopKilling()
	killed := <-kills
	elapsed := time.Since(started)

	settle(t, env)
	a := take(env, results)
	t.Logf("%d lifecycles in %s, controller killed %d times (%d processes)", p.lifecycles, elapsed.Round(time.Second), killed, killed+1)
	t.Logf("%s", a.summary(p.lifecycles))
	t.Logf("errors the sidecars saw (then retried): %v", sc.errs.counts)
	for _, f := range a.failures() {
		t.Error(f)
	}
	if killed < p.minKills {
		t.Errorf("the controller was killed %d times, fewer than the profile's %d: the lifecycles ran faster than the kills came", killed, p.minKills)
	}
}

// settle waits until EC2 has finished what the run started: deletions,
// detaches, snapshots.
func settle(t *testing.T, env *emulatortest.Env) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		busy := false
		for _, v := range env.Cloud().Volumes() {
			busy = busy || v.State == model.VolumeDeleting || v.State == model.VolumeCreating
			for _, a := range v.Attachments {
				busy = busy || a.State == model.AttachmentAttaching || a.State == model.AttachmentDetaching
			}
		}
		for _, s := range env.Cloud().Snapshots() {
			busy = busy || s.State == model.SnapshotPending
		}
		if !busy {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
