package cloud

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

// batchingConfig gives concurrent lookups a window wide enough that
// goroutines released together (see together) share a batch on a loaded
// machine. Both windows: with no call under way a lookup gathers others for
// the idle window only (5 ms by default). On CI's busy cores, with every
// package's tests running under the race detector, thirty goroutines took
// longer than 100 ms to reach the batcher (six and seven calls where five at
// most were allowed); a second is far beyond that, and costs the tests that
// count calls a second per batched round.
func batchingConfig() Config {
	cfg := testConfig()
	cfg.BatchMaxDelay = time.Second
	cfg.BatchIdleDelay = cfg.BatchMaxDelay
	return cfg
}

// together runs f(0) to f(n-1) in goroutines released at one moment, once
// all of them exist, and returns when all have returned: the lookups the
// batching tests count then arrive as close together as the machine allows.
func together(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

// getConcurrently looks up every ID at once and returns the errors by ID.
func getConcurrently(t *testing.T, c Cloud, ids []string) map[string]error {
	t.Helper()
	var (
		mu   sync.Mutex
		errs = map[string]error{}
	)
	together(len(ids), func(i int) {
		id := ids[i]
		v, err := c.GetVolume(testContext(t), id)
		if err == nil && v.ID != id {
			err = fmt.Errorf("asked for %s, got %s", id, v.ID)
		}
		mu.Lock()
		errs[id] = err
		mu.Unlock()
	})
	return errs
}

// createMany creates n volumes at once and returns their IDs.
func createMany(t *testing.T, env testEC2, n int) []string {
	t.Helper()
	c := newCloud(t, env, testConfig())
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = mustCreate(t, c, fmt.Sprintf("pvc-%d", i), &CreateVolumeOptions{SizeGiB: 1}).ID
		}()
	}
	wg.Wait()
	return ids
}

func TestConcurrentGetVolumeIsBatched(t *testing.T) {
	t.Parallel()
	env := startBackend(t, emulatortest.Options{})
	ids := createMany(t, env, 100)
	tests := []struct {
		name     string
		disable  bool
		maxCalls int
		minCalls int
	}{
		// 100 lookups fit one batch; a few more calls cover goroutines that
		// start after the first batch has left.
		{"batched", false, 5, 1},
		{"batching disabled", true, 100, 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := batchingConfig()
			cfg.DisableBatching = tc.disable
			c := newCloud(t, env, cfg)
			before := env.Calls("DescribeVolumes")
			for id, err := range getConcurrently(t, c, ids) {
				if err != nil {
					t.Errorf("%s: %v", id, err)
				}
			}
			calls := env.Calls("DescribeVolumes") - before
			if calls > tc.maxCalls || calls < tc.minCalls {
				t.Errorf("100 concurrent GetVolume calls made %d DescribeVolumes calls, want %d to %d", calls, tc.minCalls, tc.maxCalls)
			}
			t.Logf("100 concurrent GetVolume calls: %d DescribeVolumes calls", calls)
		})
	}
}

// TestBadIDDoesNotFailTheBatch: EC2 fails a whole DescribeVolumes when one
// of its IDs does not exist; only that ID's caller may see the error.
func TestBadIDDoesNotFailTheBatch(t *testing.T) {
	t.Parallel()
	env := startBackend(t, emulatortest.Options{})
	ids := createMany(t, env, 20)
	c := newCloud(t, env, batchingConfig())
	const missing, malformed = "vol-0123456789abcdef0", "vol-bogus"
	errs := getConcurrently(t, c, append(ids, missing, malformed))
	for id, err := range errs {
		switch id {
		case missing, malformed:
			wantErr(t, err, ErrNotFound)
		default:
			if err != nil {
				t.Errorf("%s failed because of another ID: %v", id, err)
			}
		}
	}
}

func TestConcurrentGetInstanceIsBatched(t *testing.T) {
	t.Parallel()
	c, env := start(t, twoInstances())
	c = newCloud(t, env, batchingConfig())
	together(30, func(i int) {
		id := env.instance(i % 3)
		in, err := c.GetInstance(testContext(t), id)
		if err != nil || in.ID != id {
			t.Errorf("GetInstance(%s) = %+v, %v", id, in, err)
		}
	})
	if n := env.Calls("DescribeInstances"); n > 3 {
		t.Errorf("30 concurrent GetInstance calls made %d DescribeInstances calls", n)
	}
	_, err := c.GetInstance(testContext(t), "i-0123456789abcdef0")
	wantErr(t, err, ErrNotFound)
}

func TestClosedCloudIsUnavailable(t *testing.T) {
	t.Parallel()
	c, _ := start(t, emulatortest.Options{})
	c.Close()
	_, err := c.GetVolume(testContext(t), "vol-0123456789abcdef0")
	wantErr(t, err, ErrUnavailable)
}

// TestEveryBatchedLookupIsBatched covers the lookups besides GetVolume that
// go through a batcher: by volume name (CreateVolume's), by snapshot ID and name, and of
// volume modifications. Each runs 30 lookups at once, once batched and once
// with batching disabled, which shows what the bound is measured against.
func TestEveryBatchedLookupIsBatched(t *testing.T) {
	t.Parallel()
	env := startBackend(t, emulatortest.Options{})
	const n = 30
	volumeIDs := createMany(t, env, n)
	setup := newCloud(t, env, testConfig())
	snapshotIDs := make([]string, n)
	for i, id := range volumeIDs {
		s, err := setup.CreateSnapshot(testContext(t), fmt.Sprintf("snap-%d", i), id, nil)
		if err != nil {
			t.Fatal(err)
		}
		snapshotIDs[i] = s.ID
	}
	// Half the volumes have a modification behind them, half were never
	// modified; neither kind may fail the other's lookups.
	for _, id := range volumeIDs[:n/2] {
		if _, err := setup.ModifyVolume(testContext(t), id, VolumeModification{SizeGiB: 2}); err != nil {
			t.Fatal(err)
		}
	}
	sizeOf := func(i int) int32 {
		if i < n/2 {
			return 2
		}
		return 1
	}

	tests := []struct {
		name   string
		action string
		lookup func(c Cloud, i int) error
	}{
		// Creating what exists looks the name up and returns the volume.
		{"CreateVolume of an existing name", "DescribeVolumes", func(c Cloud, i int) error {
			v, err := c.CreateVolume(testContext(t), fmt.Sprintf("pvc-%d", i), &CreateVolumeOptions{SizeGiB: sizeOf(i)})
			if err == nil && v.ID != volumeIDs[i] {
				err = fmt.Errorf("got %s, want %s", v.ID, volumeIDs[i])
			}
			return err
		}},
		{"GetSnapshot", "DescribeSnapshots", func(c Cloud, i int) error {
			s, err := c.GetSnapshot(testContext(t), snapshotIDs[i])
			if err == nil && s.ID != snapshotIDs[i] {
				err = fmt.Errorf("got %s, want %s", s.ID, snapshotIDs[i])
			}
			return err
		}},
		{"GetSnapshotByName", "DescribeSnapshots", func(c Cloud, i int) error {
			s, err := c.GetSnapshotByName(testContext(t), fmt.Sprintf("snap-%d", i))
			if err == nil && s.ID != snapshotIDs[i] {
				err = fmt.Errorf("got %s, want %s", s.ID, snapshotIDs[i])
			}
			return err
		}},
		// Asking for what a volume already is reads its latest modification
		// and sends nothing.
		{"ModifyVolume to the current size", "DescribeVolumesModifications", func(c Cloud, i int) error {
			v, err := c.ModifyVolume(testContext(t), volumeIDs[i], VolumeModification{SizeGiB: sizeOf(i)})
			if err == nil && v.SizeGiB != sizeOf(i) {
				err = fmt.Errorf("size %d, want %d", v.SizeGiB, sizeOf(i))
			}
			return err
		}},
	}
	for _, tc := range tests {
		for _, mode := range []struct {
			name               string
			disable            bool
			minCalls, maxCalls int
		}{
			{"batched", false, 1, 5},
			{"batching disabled", true, n, n},
		} {
			t.Run(tc.name+"/"+mode.name, func(t *testing.T) {
				cfg := batchingConfig()
				cfg.DisableBatching = mode.disable
				// Every create looks its name up, with no listing of the
				// names first: the lookups are what is measured.
				cfg.NoClientTokens = true
				c := newCloud(t, env, cfg)
				modifyCalls := env.Calls("ModifyVolume")
				before := env.Calls(tc.action)
				together(n, func(i int) {
					if err := tc.lookup(c, i); err != nil {
						t.Errorf("lookup %d: %v", i, err)
					}
				})
				calls := env.Calls(tc.action) - before
				if calls < mode.minCalls || calls > mode.maxCalls {
					t.Errorf("%d concurrent lookups made %d %s calls, want %d to %d", n, calls, tc.action, mode.minCalls, mode.maxCalls)
				}
				if env.Calls("ModifyVolume") != modifyCalls {
					t.Error("a lookup sent ModifyVolume")
				}
			})
		}
	}
}

// TestBadSnapshotIDDoesNotFailTheBatch: as with volumes, EC2 fails a whole
// DescribeSnapshots for one unknown ID; only that ID's caller may see it.
func TestBadSnapshotIDDoesNotFailTheBatch(t *testing.T) {
	t.Parallel()
	env := startBackend(t, emulatortest.Options{})
	setup := newCloud(t, env, testConfig())
	var ids []string
	for i, vol := range createMany(t, env, 10) {
		s, err := setup.CreateSnapshot(testContext(t), fmt.Sprintf("snap-%d", i), vol, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	const missing, malformed = "snap-0123456789abcdef0", "snap-bogus"
	c := newCloud(t, env, batchingConfig())
	var (
		mu   sync.Mutex
		errs = map[string]error{}
		wg   sync.WaitGroup
	)
	for _, id := range append(ids, missing, malformed) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.GetSnapshot(testContext(t), id)
			mu.Lock()
			errs[id] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	for id, err := range errs {
		switch id {
		case missing, malformed:
			wantErr(t, err, ErrNotFound)
		default:
			if err != nil {
				t.Errorf("%s failed because of another ID: %v", id, err)
			}
		}
	}
}

// TestLookupsWhileThrottledShareTheTick: while EC2 throttles, lookups that
// requests begin with, arriving apart (as the requests the SDK lets out one
// by one do), wait for the coarse grid's tick and share one call there;
// otherwise each leaves at once.
//
// The times are wide for a machine so busy (make test-arm64's emulated CPU,
// every package's tests at once) that goroutines wake up late: the lookups
// come 400 ms apart, all well before the next tick, and a batch gathers
// for 100 ms (BatchIdleDelay), which the lookups woken by one tick must
// fall within and lookups 400 ms apart never do.
func TestLookupsWhileThrottledShareTheTick(t *testing.T) {
	t.Parallel()
	const grid, apart = 3 * time.Second, 400 * time.Millisecond
	env := startBackend(t, emulatortest.Options{})
	ids := createMany(t, env, 3)
	tests := []struct {
		name      string
		throttled bool
		wantCalls int
	}{
		{"throttled", true, 1},
		{"not throttled", false, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.ThrottledPollGrid = grid
			cfg.BatchIdleDelay, cfg.BatchMaxDelay = 100*time.Millisecond, 100*time.Millisecond
			c := newCloud(t, env, cfg)
			if tc.throttled {
				c.throttles.strained(opCreateVolume, "RequestLimitExceeded", grid)
			}
			// Start just after a tick, so that the lookups all fall well
			// before the next one.
			if err := sleepUntil(testContext(t), alignUp(time.Now(), grid).Add(20*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			before := env.Calls("DescribeVolumes")
			var wg sync.WaitGroup
			for i, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(i) * apart)
					if _, err := c.GetVolume(testContext(t), id); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if calls := env.Calls("DescribeVolumes") - before; calls != tc.wantCalls {
				t.Errorf("3 GetVolume calls %v apart made %d DescribeVolumes calls, want %d", apart, calls, tc.wantCalls)
			}
		})
	}
}
