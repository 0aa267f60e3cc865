package model

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fakeStore is a disk store that keeps sizes in memory, records what the
// model asked of it, and can be told to fail or to report a busy device —
// the failure modes the model must survive, which a real store cannot be
// made to show on demand.
type fakeStore struct {
	mu         sync.Mutex
	volumes    map[string]int64
	snapshots  map[string]int64
	attached   map[string]string
	busy       map[string]bool
	failNext   map[string]error
	reconciled [][]string
	nextLoop   int
	// listedUnknown counts UnknownImages calls; removeCalls records the
	// state directory of every RemoveUnknownImages call.
	listedUnknown int
	removeCalls   []string
}

func newFakeStore() *fakeStore {
	return &fakeStore{
		volumes:   map[string]int64{},
		snapshots: map[string]int64{},
		attached:  map[string]string{},
		busy:      map[string]bool{},
		failNext:  map[string]error{},
	}
}

var _ disks.Store = (*fakeStore)(nil)

// fail makes the next call of method fail with err.
func (s *fakeStore) fail(method string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext[method] = err
}

func (s *fakeStore) setBusy(volumeID string, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy[volumeID] = busy
}

func (s *fakeStore) injected(method string) error {
	err := s.failNext[method]
	delete(s.failNext, method)
	return err
}

func (s *fakeStore) CreateVolume(id string, size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.injected("CreateVolume"); err != nil {
		return err
	}
	s.volumes[id] = size
	return nil
}

func (s *fakeStore) CreateVolumeFromSnapshot(id, snap string, size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.snapshots[snap]; !ok {
		return disks.ErrNotFound
	}
	s.volumes[id] = size
	return nil
}

func (s *fakeStore) CloneVolume(id, src string, size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.volumes[src]; !ok {
		return disks.ErrNotFound
	}
	s.volumes[id] = size
	return nil
}

func (s *fakeStore) ResizeVolume(id string, size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.injected("ResizeVolume"); err != nil {
		return err
	}
	s.volumes[id] = size
	return nil
}

func (s *fakeStore) DeleteVolume(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.injected("DeleteVolume"); err != nil {
		return err
	}
	delete(s.volumes, id)
	return nil
}

func (s *fakeStore) CreateSnapshot(snap, vol string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	size, ok := s.volumes[vol]
	if !ok {
		return disks.ErrNotFound
	}
	s.snapshots[snap] = size
	return nil
}

func (s *fakeStore) DeleteSnapshot(snap string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.snapshots, snap)
	return nil
}

func (s *fakeStore) Attach(id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.injected("Attach"); err != nil {
		return "", err
	}
	if dev, ok := s.attached[id]; ok {
		return dev, nil
	}
	dev := fmt.Sprintf("/dev/loop%d", s.nextLoop)
	s.nextLoop++
	s.attached[id] = dev
	return dev, nil
}

func (s *fakeStore) Detach(id string, force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[id] && !force {
		return disks.ErrBusy
	}
	delete(s.attached, id)
	return nil
}

func (s *fakeStore) Reconcile(ids []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reconciled = append(s.reconciled, append([]string(nil), ids...))
	return nil
}

func (s *fakeStore) UnknownImages(known []string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listedUnknown++
	return s.unknownLocked(known), nil
}

func (s *fakeStore) RemoveUnknownImages(dataDir string, known []string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeCalls = append(s.removeCalls, dataDir)
	if err := s.injected("RemoveUnknownImages"); err != nil {
		return nil, err
	}
	unknown := s.unknownLocked(known)
	for _, id := range unknown {
		delete(s.volumes, id)
		delete(s.snapshots, id)
	}
	return unknown, nil
}

// unknownLocked lists, sorted, the volumes and snapshots the store holds
// that known does not name.
func (s *fakeStore) unknownLocked(known []string) []string {
	var unknown []string
	for _, m := range []map[string]int64{s.volumes, s.snapshots} {
		for id := range m {
			if !slices.Contains(known, id) {
				unknown = append(unknown, id)
			}
		}
	}
	slices.Sort(unknown)
	return unknown
}

// holds lists, sorted, every volume and snapshot the store holds.
func (s *fakeStore) holds() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unknownLocked(nil)
}

func (s *fakeStore) isAttached(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.attached[id]
	return ok
}

func (s *fakeStore) size(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.volumes[id]
}

// testCloud is a cloud on a fake clock and store.
type testCloud struct {
	*Cloud
	clock *fakeClock
	store *fakeStore
}

// newTestCloud starts a cloud; cfg's Store and Now are filled in.
func newTestCloud(t *testing.T, cfg Config) *testCloud {
	t.Helper()
	tc := &testCloud{clock: newFakeClock(), store: newFakeStore()}
	if s, ok := cfg.Store.(*fakeStore); ok {
		tc.store = s
	}
	cfg.Store, cfg.Now = tc.store, tc.clock.Now
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	tc.Cloud = c
	return tc
}

// local is the local instance.
func (tc *testCloud) local(t *testing.T) Instance {
	t.Helper()
	in, _, ok := tc.LocalInstance()
	if !ok {
		t.Fatal("no local instance")
	}
	return in
}

// mustVolume creates an available gp3 volume in the local instance's zone.
func (tc *testCloud) mustVolume(t *testing.T, size int32) Volume {
	t.Helper()
	v, err := tc.CreateVolume(CreateVolumeInput{Zone: tc.local(t).Zone, Size: size, Type: "gp3"})
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	return tc.describe(t, v.ID)
}

// describe returns one volume as DescribeVolumes shows it now.
func (tc *testCloud) describe(t *testing.T, id string) Volume {
	t.Helper()
	page, err := tc.DescribeVolumes(Query{IDs: []string{id}})
	if err != nil {
		t.Fatalf("DescribeVolumes(%s): %v", id, err)
	}
	return page.Items[0]
}

// code returns the EC2 error code of err, or "" for nil.
func code(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return "non-EC2 error: " + err.Error()
}

func i32(n int32) *int32 { return &n }
func bptr(b bool) *bool  { return &b }
