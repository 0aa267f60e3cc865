package inflight

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestKeysOfDifferentKindsNeverCollide(t *testing.T) {
	keys := []Key{
		Volume("vol-1"),
		VolumeName("vol-1"),
		Snapshot("vol-1"),
		SnapshotName("vol-1"),
		Attachment("vol-1", ""),
		Attachment("vol-1", "i-1"),
		Attachment("vol-1/i", "1"), // would collide with a joined string
		Attachment("vol-1", "i/1"),
		Volume("vol-2"),
	}
	var s Set
	for _, k := range keys {
		release, ok := s.TryAcquire(k)
		if !ok {
			t.Fatalf("%v collided with an earlier key", k)
		}
		t.Cleanup(release)
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		key  Key
		want string
	}{
		{Volume("vol-1"), "volume vol-1"},
		{VolumeName("pvc-1"), `volume named "pvc-1"`},
		{Attachment("vol-1", "i-1"), "volume vol-1 on node i-1"},
		{Snapshot("snap-1"), "snapshot snap-1"},
		{SnapshotName("snapshot-1"), `snapshot named "snapshot-1"`},
		{Key{}, "nothing"},
	}
	for _, tc := range tests {
		if got := tc.key.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestAcquireAndRelease(t *testing.T) {
	var s Set
	k := Volume("vol-1")
	release, ok := s.TryAcquire(k)
	if !ok {
		t.Fatal("first acquire must succeed")
	}
	if _, ok := s.TryAcquire(k); ok {
		t.Fatal("a duplicate must be refused while the first runs")
	}
	if r, ok := s.TryAcquire(Volume("vol-2")); !ok {
		t.Fatal("another key must not be blocked")
	} else {
		r()
	}
	release()
	again, ok := s.TryAcquire(k)
	if !ok {
		t.Fatal("acquire after release must succeed")
	}
	// A stale release from the first holder must not free the second claim.
	release()
	if _, ok := s.TryAcquire(k); ok {
		t.Fatal("a second release of an old claim freed the new holder's key")
	}
	again()
	if r, ok := s.TryAcquire(k); !ok {
		t.Fatal("acquire after the second holder released must succeed")
	} else {
		r()
	}
}

// TestConcurrentDuplicates hammers a few keys from many goroutines and
// checks that no two holders of one key ever overlap. Run it with -race.
func TestConcurrentDuplicates(t *testing.T) {
	const goroutines, rounds = 64, 200
	keys := []Key{Volume("vol-1"), Attachment("vol-1", "i-1"), SnapshotName("s")}
	var s Set
	holders := make([]atomic.Int32, len(keys))
	var acquired, overlaps atomic.Int32
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				i := (g + r) % len(keys)
				release, ok := s.TryAcquire(keys[i])
				if !ok {
					continue
				}
				acquired.Add(1)
				if holders[i].Add(1) != 1 {
					overlaps.Add(1)
				}
				holders[i].Add(-1)
				release()
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d acquisitions overlapped another holder of the same key", n)
	}
	if acquired.Load() == 0 {
		t.Fatal("no goroutine ever acquired a key")
	}
	for _, k := range keys {
		release, ok := s.TryAcquire(k)
		if !ok {
			t.Fatalf("%v is still held after every goroutine released it", k)
		}
		release()
	}
}
