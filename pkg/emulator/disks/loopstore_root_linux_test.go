package disks

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
)

// assertSparse checks that an image file uses less space than its size, so
// a copy did not fill its holes.
func assertSparse(t *testing.T, path string, maxAllocated int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var allocated int64
	for _, seg := range dataSegments(t, f) {
		allocated += seg[1] - seg[0]
	}
	if allocated > maxAllocated {
		t.Fatalf("%s has %d bytes of data, want at most %d (holes were filled)", path, allocated, maxAllocated)
	}
}

func TestAttachWriteSnapshotRestore(t *testing.T) {
	s, linkDir := newRootStore(t)
	if err := s.CreateVolume(volA, 64*mib); err != nil {
		t.Fatal(err)
	}
	devA := mustAttach(t, s, linkDir, volA)
	if again := mustAttach(t, s, linkDir, volA); again != devA {
		t.Fatalf("attaching again gave %s, want the same %s", again, devA)
	}
	written := []extent{{0, pattern(1, 4096)}, {40 * mib, pattern(2, mib)}, {64*mib - 512, pattern(3, 512)}}
	for _, e := range written {
		writeDevice(t, devA, e.off, e.data)
	}
	for range 2 { // the second call must find the snapshot made
		if err := s.CreateSnapshot(snap1, volA); err != nil {
			t.Fatalf("CreateSnapshot: %v", err)
		}
	}
	// Writes after the snapshot must not reach it.
	writeDevice(t, devA, 0, pattern(9, 4096))

	if err := s.CreateVolumeFromSnapshot(volB, snap1, 128*mib); err != nil {
		t.Fatalf("CreateVolumeFromSnapshot: %v", err)
	}
	devB := mustAttach(t, s, linkDir, volB)
	if devB == devA {
		t.Fatalf("both volumes attached as %s", devA)
	}
	assertDeviceHolds(t, devB, written)
	if got := deviceSize(t, devB); got != 128*mib {
		t.Fatalf("restored volume is %d bytes, want %d", got, 128*mib)
	}
	assertSparse(t, s.snapshotPath(snap1), 8*mib)
	assertSparse(t, s.volumePath(volB), 8*mib)

	for _, id := range []string{volA, volB} {
		mustDetach(t, s, linkDir, id)
		mustDetach(t, s, linkDir, id) // detaching what is detached succeeds
		if err := s.DeleteVolume(id); err != nil {
			t.Fatalf("DeleteVolume(%s): %v", id, err)
		}
	}
	for range 2 {
		if err := s.DeleteSnapshot(snap1); err != nil {
			t.Fatalf("DeleteSnapshot: %v", err)
		}
	}
	if _, err := os.Stat(s.snapshotPath(snap1)); !os.IsNotExist(err) {
		t.Fatalf("snapshot image still exists: %v", err)
	}
}

func TestCloneAttachedVolume(t *testing.T) {
	s, linkDir := newRootStore(t)
	if err := s.CreateVolume(volA, 32*mib); err != nil {
		t.Fatal(err)
	}
	devA := mustAttach(t, s, linkDir, volA)
	written := []extent{{mib, pattern(4, 2*mib)}, {30 * mib, pattern(5, 4096)}}
	for _, e := range written {
		writeDevice(t, devA, e.off, e.data)
	}
	if err := s.CloneVolume(volC, volA, 48*mib); err != nil {
		t.Fatalf("CloneVolume: %v", err)
	}
	if err := s.CloneVolume(volC, volA, 48*mib); err != nil {
		t.Fatalf("CloneVolume again: %v", err)
	}
	devC := mustAttach(t, s, linkDir, volC)
	assertDeviceHolds(t, devC, written)
	if got := deviceSize(t, devC); got != 48*mib {
		t.Fatalf("clone is %d bytes, want %d", got, 48*mib)
	}
	assertSparse(t, s.volumePath(volC), 8*mib)
	// The clone is a copy: writing it leaves the source alone.
	writeDevice(t, devC, mib, pattern(6, 4096))
	assertDeviceHolds(t, devA, written)
	mustDetach(t, s, linkDir, volA)
	mustDetach(t, s, linkDir, volC)
}

func TestMissingAndInvalid(t *testing.T) {
	s, _ := newRootStore(t)
	if err := s.CreateVolume(volA, 8*mib); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSnapshot(snap1, volA); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		call         func() error
		wantNotFound bool
		wantErr      bool
	}{
		{name: "attach a missing volume", call: func() error { _, err := s.Attach(volB); return err }, wantNotFound: true},
		{name: "resize a missing volume", call: func() error { return s.ResizeVolume(volB, 8*mib) }, wantNotFound: true},
		{name: "snapshot a missing volume", call: func() error { return s.CreateSnapshot("snap-2", volB) }, wantNotFound: true},
		{name: "restore a missing snapshot", call: func() error { return s.CreateVolumeFromSnapshot(volB, "snap-2", 8*mib) }, wantNotFound: true},
		{name: "clone a missing volume", call: func() error { return s.CloneVolume(volB, volC, 8*mib) }, wantNotFound: true},
		{name: "shrink", call: func() error { return s.ResizeVolume(volA, 4*mib) }, wantErr: true},
		{name: "restore smaller than the snapshot", call: func() error { return s.CreateVolumeFromSnapshot(volB, snap1, 4*mib) }, wantErr: true},
		{name: "partial sector", call: func() error { return s.CreateVolume(volB, 1000) }, wantErr: true},
		{name: "path in an ID", call: func() error { return s.CreateVolume("vol-../../x", 8*mib) }, wantErr: true},
		{name: "detach a missing volume", call: func() error { return s.Detach(volB, false) }},
		{name: "delete a missing volume", call: func() error { return s.DeleteVolume(volB) }},
		{name: "delete a missing snapshot", call: func() error { return s.DeleteSnapshot("snap-2") }},
		{name: "resize to the same size", call: func() error { return s.ResizeVolume(volA, 8*mib) }},
		{name: "create an existing volume", call: func() error { return s.CreateVolume(volA, 8*mib) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			switch {
			case tc.wantNotFound && !errors.Is(err, ErrNotFound):
				t.Fatalf("error = %v, want ErrNotFound", err)
			case tc.wantErr && (err == nil || errors.Is(err, ErrNotFound)):
				t.Fatalf("error = %v, want a validation error", err)
			case !tc.wantNotFound && !tc.wantErr && err != nil:
				t.Fatalf("error = %v, want success", err)
			}
		})
	}
	// Creating an existing but smaller volume grows it, never shrinks it.
	if err := s.CreateVolume(volA, 16*mib); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(s.volumePath(volA)); err != nil || st.Size() != 16*mib {
		t.Fatalf("volume after CreateVolume with a larger size: %v, %v", st, err)
	}
}

func TestConcurrentAttachDetach(t *testing.T) {
	s, linkDir := newRootStore(t)
	const n = 8
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("vol-%017x", i+1)
		if err := s.CreateVolume(ids[i], 4*mib); err != nil {
			t.Fatal(err)
		}
	}
	// Every volume attached from two goroutines at once: one device each,
	// distinct across volumes.
	devs := make([][2]string, n)
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for i := range ids {
		for j := range 2 {
			wg.Go(func() {
				dev, err := s.Attach(ids[i])
				devs[i][j] = dev
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Attach: %v", err)
		}
	}
	seen := map[string]string{}
	for i, id := range ids {
		if devs[i][0] != devs[i][1] {
			t.Fatalf("%s attached twice as %s and %s", id, devs[i][0], devs[i][1])
		}
		if other, dup := seen[devs[i][0]]; dup {
			t.Fatalf("%s and %s share %s", id, other, devs[i][0])
		}
		seen[devs[i][0]] = id
		mustAttach(t, s, linkDir, id) // checks the link and the backing file
	}
	detachErrs := make(chan error, n)
	for _, id := range ids {
		wg.Go(func() { detachErrs <- s.Detach(id, false) })
	}
	wg.Wait()
	close(detachErrs)
	for err := range detachErrs {
		if err != nil {
			t.Fatalf("Detach: %v", err)
		}
	}
	for _, id := range ids {
		assertDetached(t, s, linkDir, id)
	}
}
