package disks

import (
	"fmt"
	"io/fs"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLayoutPaths(t *testing.T) {
	l := newLayout("/data")
	if got, want := l.volumePath("vol-0a"), "/data/volumes/vol-0a.img"; got != want {
		t.Errorf("volumePath = %q, want %q", got, want)
	}
	if got, want := l.snapshotPath("snap-0a"), "/data/snapshots/snap-0a.img"; got != want {
		t.Errorf("snapshotPath = %q, want %q", got, want)
	}
	tests := []struct {
		path   string
		wantID string
		wantOK bool
	}{
		{path: "/data/volumes/vol-0a.img", wantID: "vol-0a", wantOK: true},
		{path: "/data/volumes/vol-0a.img (deleted)", wantID: "vol-0a", wantOK: true},
		{path: "/data/volumes/vol-0a.img.bak", wantOK: false},
		{path: "/data/volumes/.tmp-vol-0a.img-123", wantOK: false},
		{path: "/data/snapshots/snap-0a.img", wantOK: false},
		{path: "/data/volumes/sub/vol-0a.img", wantOK: false},
		{path: "/other/volumes/vol-0a.img", wantOK: false},
		{path: "/data/volumes/vol-.img", wantOK: false},
		{path: "", wantOK: false},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			id, ok := l.volumeIDFromPath(tc.path)
			if ok != tc.wantOK || id != tc.wantID {
				t.Fatalf("volumeIDFromPath(%q) = %q, %v; want %q, %v", tc.path, id, ok, tc.wantID, tc.wantOK)
			}
		})
	}
}

func TestVolumeIDFromLinkName(t *testing.T) {
	tests := []struct {
		name   string
		wantID string
		wantOK bool
	}{
		{name: LinkName("vol-0123456789abcdef0"), wantID: "vol-0123456789abcdef0", wantOK: true},
		{name: "nvme-Amazon_Elastic_Block_Store_vol1a2b3c4d", wantID: "vol-1a2b3c4d", wantOK: true},
		{name: "nvme-Amazon_Elastic_Block_Store_vol1a2b3c4d-ns-1", wantOK: false},
		{name: "nvme-Amazon_Elastic_Block_Store_vol", wantOK: false},
		{name: "nvme-Amazon_EC2_NVMe_Instance_Storage_AWS1", wantOK: false},
		{name: "nvme-Amazon_Elastic_Block_Store_snap1a", wantOK: false},
		{name: ".tmp-nvme-Amazon_Elastic_Block_Store_vol1a-42", wantOK: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, ok := volumeIDFromLinkName(tc.name)
			if ok != tc.wantOK || (ok && id != tc.wantID) {
				t.Fatalf("volumeIDFromLinkName(%q) = %q, %v; want %q, %v", tc.name, id, ok, tc.wantID, tc.wantOK)
			}
		})
	}
}

func TestLoopNumber(t *testing.T) {
	tests := []struct {
		path   string
		want   int
		wantOK bool
	}{
		{path: "/dev/loop0", want: 0, wantOK: true},
		{path: "/dev/loop123", want: 123, wantOK: true},
		{path: "/dev/loop0p1", wantOK: false},
		{path: "/dev/loop", wantOK: false},
		{path: "/dev/loop-control", wantOK: false},
		{path: "/dev/nvme1n1", wantOK: false},
		{path: "../../nvme1n1", wantOK: false},
		{path: "/tmp/loop0", wantOK: false},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			n, ok := loopNumberFromPath(tc.path)
			if ok != tc.wantOK || (ok && n != tc.want) {
				t.Fatalf("loopNumberFromPath(%q) = %d, %v; want %d, %v", tc.path, n, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// waitForWaiters spins until key has n holders or waiters, without sleeping
// for a guessed time.
func waitForWaiters(k *keyedMutex, key string, n int) {
	for {
		k.mu.Lock()
		m := k.locks[key]
		got := 0
		if m != nil {
			got = m.refs
		}
		k.mu.Unlock()
		if got == n {
			return
		}
		runtime.Gosched()
	}
}

func TestKeyedMutex(t *testing.T) {
	var k keyedMutex

	// Different keys do not block each other.
	unlockA := k.lock("vol-a")
	k.lock("vol-b")()

	// The same key waits for its holder.
	var mu sync.Mutex
	acquired := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		unlock := k.lock("vol-x", "vol-a")
		mu.Lock()
		acquired = true
		mu.Unlock()
		unlock()
	}()
	waitForWaiters(&k, "vol-a", 2)
	mu.Lock()
	if acquired {
		t.Fatal("a second locker of vol-a got in while the first held it")
	}
	mu.Unlock()
	unlockA()
	<-done
	if !acquired {
		t.Fatal("the waiting locker never got the lock")
	}

	// Duplicate keys are taken once, and nothing stays in the map.
	k.lock("vol-c", "vol-c")()
	if len(k.locks) != 0 {
		t.Fatalf("locks left in the map: %v", k.locks)
	}
}

// TestLoopGone: a loop device another program unbinds or removes while the
// store scans sysfs is not an error (CI once failed a concurrent detach on
// "read /sys/block/loop5/loop/backing_file: no such device", ENODEV, while
// another package's test removed loop5); any other read error still is.
func TestLoopGone(t *testing.T) {
	readErr := func(errno error) error {
		return fmt.Errorf("wrapped: %w", &fs.PathError{Op: "read", Path: "/sys/block/loop5/loop/backing_file", Err: errno})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "not bound (no loop directory)", err: readErr(unix.ENOENT), want: true},
		{name: "being removed", err: readErr(unix.ENXIO), want: true},
		{name: "removed", err: readErr(unix.ENODEV), want: true},
		{name: "permission", err: readErr(unix.EACCES), want: false},
		{name: "I/O error", err: readErr(unix.EIO), want: false},
		{name: "no error", err: nil, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := loopGone(tc.err); got != tc.want {
				t.Fatalf("loopGone(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
