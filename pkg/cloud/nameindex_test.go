package cloud

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

func TestVolumeNameIndex(t *testing.T) {
	t.Parallel()
	type step struct {
		after time.Duration // the clock moves on by this first
		name  string
		// listing: what a listing made in this step answers (nil: it fails).
		listing []string
		want    bool
		lists   int // listings made so far
	}
	listed := func(names ...string) []string { return append([]string{}, names...) }
	tests := []struct {
		name   string
		maxAge time.Duration
		steps  []step
	}{
		{name: "off: every name may exist, nothing is listed", maxAge: 0, steps: []step{
			{name: "pvc-a", want: true},
			{name: "pvc-b", want: true},
		}},
		{name: "a name the listing lacks is new, one it has may exist", maxAge: time.Hour, steps: []step{
			{name: "pvc-new", listing: listed("pvc-old"), want: false, lists: 1},
			{name: "pvc-old", want: true, lists: 1},
			{after: 59 * time.Minute, name: "pvc-new", want: false, lists: 1},
		}},
		{name: "a listing as old as maxAge is made again", maxAge: time.Hour, steps: []step{
			{name: "pvc-a", listing: listed(), want: false, lists: 1},
			{after: time.Hour, name: "pvc-a", listing: listed("pvc-a"), want: true, lists: 2},
			{name: "pvc-b", want: false, lists: 2},
		}},
		{name: "a failed listing: every name may exist, and the next is made a minute later", maxAge: time.Hour, steps: []step{
			{name: "pvc-a", want: true, lists: 1},
			{after: 59 * time.Second, name: "pvc-a", listing: listed(), want: true, lists: 1},
			{after: time.Second, name: "pvc-a", listing: listed(), want: false, lists: 2},
		}},
		{name: "a failed listing keeps no stale one either", maxAge: time.Hour, steps: []step{
			{name: "pvc-a", listing: listed(), want: false, lists: 1},
			{after: 2 * time.Hour, name: "pvc-a", want: true, lists: 2},
			{after: time.Minute, name: "pvc-b", listing: listed("pvc-a"), want: false, lists: 3},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now := time.Unix(1_700_000_000, 0)
			x := newVolumeNameIndex(tc.maxAge)
			x.now = func() time.Time { return now }
			lists := 0
			for i, s := range tc.steps {
				now = now.Add(s.after)
				list := func(context.Context) (map[string]struct{}, error) {
					lists++
					if s.listing == nil {
						return nil, errors.New("throttled")
					}
					names := map[string]struct{}{}
					for _, n := range s.listing {
						names[n] = struct{}{}
					}
					return names, nil
				}
				if got := x.mayExist(context.Background(), s.name, list); got != s.want {
					t.Errorf("step %d: mayExist(%s) = %v, want %v", i, s.name, got, s.want)
				}
				if lists != s.lists {
					t.Errorf("step %d: %d listings, want %d", i, lists, s.lists)
				}
			}
		})
	}
}

// TestVolumeNameIndexSharesOneListing: creates that come while the index is
// being listed wait for that listing instead of making their own.
func TestVolumeNameIndexSharesOneListing(t *testing.T) {
	t.Parallel()
	x := newVolumeNameIndex(time.Hour)
	var lists atomic.Int32
	release := make(chan struct{})
	list := func(context.Context) (map[string]struct{}, error) {
		lists.Add(1)
		<-release
		return map[string]struct{}{"pvc-0": {}}, nil
	}
	var wg sync.WaitGroup
	got := make([]bool, 5)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = x.mayExist(context.Background(), "pvc-"+string(rune('0'+i)), list)
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := lists.Load(); n != 1 {
		t.Errorf("%d listings for five creates at once, want 1", n)
	}
	if want := []bool{true, false, false, false, false}; !slices.Equal(got, want) {
		t.Errorf("mayExist = %v, want %v", got, want)
	}
}

// TestCreatesOfNewNamesSkipTheLookup: the creates of names no volume
// carries make one listing of the named volumes between them, and no lookup
// by name each; a name the listing holds is looked up, and its volume
// returned without another CreateVolume. (Against moto, which keeps no
// ClientToken, every create looks its name up.)
func TestCreatesOfNewNamesSkipTheLookup(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{}, motoIgnoresClientToken)
	existing := mustCreate(t, c, "pvc-existing", &CreateVolumeOptions{SizeGiB: 1})

	// A fresh process: its first create lists the names, the others use
	// that listing.
	c = newCloud(t, env, testConfig())
	byFilter := func() int { return env.Metrics().CountReads("DescribeVolumes", "filters") }
	before := byFilter()
	for _, name := range []string{"pvc-new-1", "pvc-new-2", "pvc-new-3"} {
		mustCreate(t, c, name, &CreateVolumeOptions{SizeGiB: 1})
	}
	if n := byFilter() - before; n != 1 {
		t.Errorf("%d DescribeVolumes by filter for three new names, want 1 (the listing)", n)
	}
	creates := env.Calls("CreateVolume")
	again := mustCreate(t, c, "pvc-existing", &CreateVolumeOptions{SizeGiB: 1})
	if again.ID != existing.ID {
		t.Fatalf("the create of a listed name made %s, not %s", again.ID, existing.ID)
	}
	if n := env.Calls("CreateVolume") - creates; n != 0 {
		t.Errorf("%d CreateVolume calls for a name the listing holds; its lookup should find the volume", n)
	}
	if n := byFilter() - before; n != 2 {
		t.Errorf("%d DescribeVolumes by filter in all, want 2 (the listing, the listed name's lookup)", n)
	}
}

// TestCreateVolumeAfterEC2ForgotItsToken: a create retried after EC2 has
// forgotten the first one's ClientToken would make a second volume with
// that token; the listing that is read again once it is older than
// ClientTokenMemory less VisibilityTimeout names the volume, so the retry
// looks the name up and returns it.
func TestCreateVolumeAfterEC2ForgotItsToken(t *testing.T) {
	t.Parallel()
	const memory = 2 * time.Second
	emulatorOnly(t, motoIgnoresClientToken)
	env := emulatortest.Start(t, emulatortest.Options{ClientTokenTTL: memory})
	cfg := testConfig()
	cfg.ClientTokenMemory = memory
	c := newCloud(t, env, cfg)
	first := mustCreate(t, c, "pvc-a", &CreateVolumeOptions{SizeGiB: 1})

	time.Sleep(memory + 100*time.Millisecond) // EC2 forgets the token
	for _, who := range []struct {
		name string
		c    *ec2Cloud
	}{{"the same process", c}, {"a restarted one", newCloud(t, env, cfg)}} {
		again := mustCreate(t, who.c, "pvc-a", &CreateVolumeOptions{SizeGiB: 1})
		if again.ID != first.ID {
			t.Errorf("%s made %s after EC2 forgot the token of %s", who.name, again.ID, first.ID)
		}
	}
	vols, err := c.volumesNamed(testContext(t), "pvc-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 1 {
		t.Errorf("%d volumes carry the name, want 1", len(vols))
	}
}

// TestNameIndexMaxAge: how long a listing serves follows the cloud's
// memory of tokens, less the window of its reads.
func TestNameIndexMaxAge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want time.Duration
	}{
		{"defaults", Config{}, DefaultClientTokenMemory - DefaultVisibilityTimeout},
		{"no tokens", Config{NoClientTokens: true}, 0},
		{"memory within the window", Config{ClientTokenMemory: time.Minute, VisibilityTimeout: 2 * time.Minute}, 0},
		{"longer memory", Config{ClientTokenMemory: 12 * time.Hour, VisibilityTimeout: 5 * time.Minute}, 12*time.Hour - 5*time.Minute},
	}
	for _, tc := range tests {
		if got := tc.cfg.withDefaults().nameIndexMaxAge(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRetriedCreateTeachesNothing: a create sent again (the provisioner's
// retry after its deadline) is answered with the volume the first one made,
// available for some time already; that answer says nothing of how long a
// create takes, so it teaches the estimate nothing, where the first one's
// answer, done at once, did.
func TestRetriedCreateTeachesNothing(t *testing.T) {
	t.Parallel()
	c, _ := startEmulator(t, emulatortest.Options{}, motoIgnoresClientToken)
	first := mustCreate(t, c, "pvc-a", &CreateVolumeOptions{SizeGiB: 1})
	if n := len(c.latencies.samples[transitionCreate]); n != 1 {
		t.Fatalf("the first create's answer, done at once, taught %d samples, want 1", n)
	}
	if again := mustCreate(t, c, "pvc-a", &CreateVolumeOptions{SizeGiB: 1}); again.ID != first.ID {
		t.Fatalf("the retry made %s, not %s", again.ID, first.ID)
	}
	if n := len(c.latencies.samples[transitionCreate]); n != 1 {
		t.Errorf("the retry's answer taught the estimate (%d samples, want 1)", n)
	}
}
