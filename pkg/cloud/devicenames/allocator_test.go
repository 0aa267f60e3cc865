package devicenames

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable time source for rejection and idle expiry.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestAllocator(ttl time.Duration) (*Allocator, *fakeClock) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a := NewAllocator(ttl)
	a.now = clock.now
	return a, clock
}

func TestCandidates(t *testing.T) {
	// EC2's documented device names for HVM instances.
	valid := regexp.MustCompile(`^/dev/xvd([a-d][a-z]|[e-z])$`)
	names := Candidates()
	if len(names) != 126 {
		t.Fatalf("got %d candidates, want 126 (enough for the largest EBS attachment limit)", len(names))
	}
	seen := map[string]bool{}
	for i, n := range names {
		if !valid.MatchString(n) {
			t.Errorf("candidate %q is not a valid HVM device name", n)
		}
		if seen[canonical(n)] {
			t.Errorf("candidate %q appears twice", n)
		}
		seen[canonical(n)] = true
		if isXvdc := regexp.MustCompile(`^/dev/xvdc`).MatchString(n); isXvdc != (i >= len(preferred)) {
			t.Errorf("candidate %d %q: /dev/xvdc* names must come last, and only they", i, n)
		}
	}
	names[0] = "changed"
	if Candidates()[0] == "changed" {
		t.Error("Candidates returned the allocator's own slice")
	}
}

func TestCanonical(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/dev/xvdba", "xvdba"},
		{"xvdba", "xvdba"},
		{"/dev/sdf", "xvdf"},
		{"sdf", "xvdf"},
		{"/dev/sda1", "xvda1"},
		{"/dev/nvme1n1", "nvme1n1"},
	}
	for _, tc := range tests {
		if got := canonical(tc.in); got != tc.want {
			t.Errorf("canonical(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestAcquireSkipsNamesInUse(t *testing.T) {
	tests := []struct {
		name  string
		inUse []string
		want  string
	}{
		{"empty instance gets the first name", nil, "/dev/xvdaa"},
		{"a mapped name is skipped", []string{"/dev/xvda", "/dev/xvdaa"}, "/dev/xvdab"},
		{"names without /dev/ count too", []string{"xvdaa", "xvdab"}, "/dev/xvdac"},
		{"sd names block their xvd twin", []string{"/dev/sdaa", "sdab"}, "/dev/xvdac"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := newTestAllocator(time.Hour)
			l, err := a.Acquire("i-1", "vol-1", tc.inUse)
			if err != nil {
				t.Fatal(err)
			}
			if l.Name != tc.want {
				t.Errorf("got %s, want %s", l.Name, tc.want)
			}
		})
	}
}

func TestAcquireHoldsNamesForInflightAttaches(t *testing.T) {
	a, _ := newTestAllocator(time.Hour)
	l1, err := a.Acquire("i-1", "vol-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := a.Acquire("i-1", "vol-2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if l1.Name == l2.Name {
		t.Fatalf("two in-flight attaches got the same name %s", l1.Name)
	}
	// Another instance has its own namespace.
	other, err := a.Acquire("i-2", "vol-3", nil)
	if err != nil {
		t.Fatal(err)
	}
	if other.Name != "/dev/xvdaa" {
		t.Errorf("first name on another instance = %s, want /dev/xvdaa", other.Name)
	}
}

func TestAcquireSameVolumeSharesName(t *testing.T) {
	a, _ := newTestAllocator(time.Hour)
	l1, _ := a.Acquire("i-1", "vol-1", nil)
	l2, _ := a.Acquire("i-1", "vol-1", nil)
	if l1.Name != l2.Name {
		t.Fatalf("same volume got %s and %s", l1.Name, l2.Name)
	}
	l1.Release()
	l1.Release() // a second release of the same lease must not drop the other holder
	l3, _ := a.Acquire("i-1", "vol-2", nil)
	if l3.Name == l2.Name {
		t.Fatalf("name %s handed out while still held by vol-1's second attach", l2.Name)
	}
}

func TestAcquireRoundRobinAfterRelease(t *testing.T) {
	a, clock := newTestAllocator(time.Hour)
	l1, _ := a.Acquire("i-1", "vol-1", nil)
	l1.Release()
	clock.advance(time.Minute)
	l2, _ := a.Acquire("i-1", "vol-2", nil)
	if l2.Name == l1.Name {
		t.Errorf("freed name %s was handed out again at once", l1.Name)
	}
	l2.Release()
	// After the instance has been idle for idleTTL it is forgotten, and the
	// search starts from the top again.
	clock.advance(idleTTL)
	l3, _ := a.Acquire("i-2", "vol-3", nil) // any acquire sweeps idle instances
	l3.Release()
	if _, ok := a.instances["i-1"]; ok {
		t.Error("idle instance i-1 is still remembered")
	}
}

func TestRejectedNamesAreAvoided(t *testing.T) {
	a, clock := newTestAllocator(10 * time.Minute)
	a.Reject("i-1", "/dev/xvdaa")
	l, _ := a.Acquire("i-1", "vol-1", nil)
	if l.Name == "/dev/xvdaa" {
		t.Fatal("rejected name handed out while others are free")
	}
	l.Release()

	// After the rejection expires the name is usable again.
	// Rewind the round-robin position so the search starts at the
	// formerly rejected name.
	clock.advance(10 * time.Minute)
	a.instances["i-1"].next = 0
	l2, _ := a.Acquire("i-1", "vol-2", nil)
	if l2.Name != "/dev/xvdaa" {
		t.Errorf("after expiry got %s, want /dev/xvdaa", l2.Name)
	}
}

func TestExhaustion(t *testing.T) {
	all := Candidates()
	tests := []struct {
		name     string
		inUse    []string
		rejected []string
		want     string
		wantErr  error
	}{
		{"fallback names after the preferred ones", all[:len(preferred)], nil, "/dev/xvdca", nil},
		{"rejected names are the last resort, oldest first", all[2:], []string{all[1], all[0]}, all[1], nil},
		{"nothing free", all, nil, "", ErrNoFreeName},
		{"rejected but in use is not free", all, all[:1], "", ErrNoFreeName},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, clock := newTestAllocator(time.Hour)
			for _, n := range tc.rejected {
				a.Reject("i-1", n)
				clock.advance(time.Second)
			}
			l, err := a.Acquire("i-1", "vol-1", tc.inUse)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && l.Name != tc.want {
				t.Errorf("got %s, want %s", l.Name, tc.want)
			}
		})
	}
}

func TestConcurrentAcquireGivesDistinctNames(t *testing.T) {
	a := NewAllocator(time.Hour)
	const attaches = 100
	names := make([]string, attaches)
	var wg sync.WaitGroup
	for i := range attaches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := a.Acquire("i-1", fmt.Sprintf("vol-%d", i), []string{"/dev/xvda"})
			if err != nil {
				t.Error(err)
				return
			}
			names[i] = l.Name
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Fatalf("name %s handed out twice", n)
		}
		seen[n] = true
	}
}
