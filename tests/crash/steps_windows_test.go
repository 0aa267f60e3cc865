package crash

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/diskplane/diskplane/pkg/csiproxy"
)

// errPluginGone is what every call of a plugin the harness "killed"
// answers: the process is gone, and nothing it would still have done
// happens.
var errPluginGone = errors.New("crash harness: the plugin was killed")

// stepHost is the Windows node plugin's view of the host with the harness
// in the way: every call is a step, counted and recorded; at the armed step
// the call fails without happening (fail), or the plugin "dies" — that call
// and every later one of this plugin fail without happening (kill), or
// after that call happened (kill-after). A restarted plugin gets a new
// stepHost over the same host.
type stepHost struct {
	host csiproxy.Host

	mu    sync.Mutex
	plan  interruption
	trace []string
	dead  bool
}

// arm sets the plan for the calls from now on and counts them afresh.
func (s *stepHost) arm(i interruption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plan, s.trace = i, nil
}

// steps returns the calls since the last arm.
func (s *stepHost) steps() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.trace...)
}

// killed reports whether the plugin of this stepHost died.
func (s *stepHost) killed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead
}

// step runs one call, name with args, unless the plan stops it.
func (s *stepHost) step(name string, args []any, call func() error) error {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return errPluginGone
	}
	s.trace = append(s.trace, fmt.Sprint(append([]any{name}, args...)...))
	k, mode := len(s.trace), s.plan.Mode
	at := k == s.plan.At
	if at && mode == modeKill {
		s.dead = true
	}
	s.mu.Unlock()
	switch {
	case at && mode == modeFail:
		return fmt.Errorf("crash harness: step %d (%s) fails", k, name)
	case at && mode == modeKill:
		return errPluginGone
	}
	err := call()
	if at && mode == modeKillAfter {
		s.mu.Lock()
		s.dead = true
		s.mu.Unlock()
		return errPluginGone
	}
	return err
}

func (s *stepHost) ListDiskIDs(ctx context.Context) (ids map[uint32]csiproxy.DiskIDs, err error) {
	err = s.step("ListDiskIDs", nil, func() (err error) { ids, err = s.host.ListDiskIDs(ctx); return })
	return ids, err
}

func (s *stepHost) Rescan(ctx context.Context) error {
	return s.step("Rescan", nil, func() error { return s.host.Rescan(ctx) })
}

func (s *stepHost) DiskSize(ctx context.Context, n uint32) (size int64, err error) {
	err = s.step("DiskSize", []any{" ", n}, func() (err error) { size, err = s.host.DiskSize(ctx, n); return })
	return size, err
}

func (s *stepHost) SetDiskOnline(ctx context.Context, n uint32, online bool) error {
	return s.step("SetDiskOnline", []any{" ", n, " ", online}, func() error { return s.host.SetDiskOnline(ctx, n, online) })
}

func (s *stepHost) ReadDisk(ctx context.Context, n uint32, offset int64, b []byte) error {
	return s.step("ReadDisk", []any{" ", n, " ", offset}, func() error { return s.host.ReadDisk(ctx, n, offset, b) })
}

func (s *stepHost) PartitionDisk(ctx context.Context, n uint32) error {
	return s.step("PartitionDisk", []any{" ", n}, func() error { return s.host.PartitionDisk(ctx, n) })
}

func (s *stepHost) VolumesOnDisk(ctx context.Context, n uint32) (volumes []string, err error) {
	err = s.step("VolumesOnDisk", []any{" ", n}, func() (err error) { volumes, err = s.host.VolumesOnDisk(ctx, n); return })
	return volumes, err
}

func (s *stepHost) IsVolumeFormatted(ctx context.Context, v string) (formatted bool, err error) {
	err = s.step("IsVolumeFormatted", []any{" ", v}, func() (err error) { formatted, err = s.host.IsVolumeFormatted(ctx, v); return })
	return formatted, err
}

func (s *stepHost) FormatVolume(ctx context.Context, v string) error {
	return s.step("FormatVolume", []any{" ", v}, func() error { return s.host.FormatVolume(ctx, v) })
}

func (s *stepHost) MountVolume(ctx context.Context, v, path string) error {
	return s.step("MountVolume", []any{" ", v, " ", path}, func() error { return s.host.MountVolume(ctx, v, path) })
}

func (s *stepHost) UnmountVolume(ctx context.Context, v, path string) error {
	return s.step("UnmountVolume", []any{" ", v, " ", path}, func() error { return s.host.UnmountVolume(ctx, v, path) })
}

func (s *stepHost) ResizeVolume(ctx context.Context, v string) error {
	return s.step("ResizeVolume", []any{" ", v}, func() error { return s.host.ResizeVolume(ctx, v) })
}

func (s *stepHost) VolumeStats(ctx context.Context, v string) (total, used int64, err error) {
	err = s.step("VolumeStats", []any{" ", v}, func() (err error) { total, used, err = s.host.VolumeStats(ctx, v); return })
	return total, used, err
}

func (s *stepHost) DiskOfVolume(ctx context.Context, v string) (n uint32, err error) {
	err = s.step("DiskOfVolume", []any{" ", v}, func() (err error) { n, err = s.host.DiskOfVolume(ctx, v); return })
	return n, err
}

func (s *stepHost) VolumeAt(ctx context.Context, path string) (v string, err error) {
	err = s.step("VolumeAt", []any{" ", path}, func() (err error) { v, err = s.host.VolumeAt(ctx, path); return })
	return v, err
}

func (s *stepHost) PathExists(ctx context.Context, path string) (exists bool, err error) {
	err = s.step("PathExists", []any{" ", path}, func() (err error) { exists, err = s.host.PathExists(ctx, path); return })
	return exists, err
}

func (s *stepHost) Mkdir(ctx context.Context, path string) error {
	return s.step("Mkdir", []any{" ", path}, func() error { return s.host.Mkdir(ctx, path) })
}

func (s *stepHost) Rmdir(ctx context.Context, path string) error {
	return s.step("Rmdir", []any{" ", path}, func() error { return s.host.Rmdir(ctx, path) })
}

func (s *stepHost) CreateSymlink(ctx context.Context, source, target string) error {
	return s.step("CreateSymlink", []any{" ", source, " ", target}, func() error { return s.host.CreateSymlink(ctx, source, target) })
}

func (s *stepHost) IsSymlink(ctx context.Context, path string) (symlink bool, err error) {
	err = s.step("IsSymlink", []any{" ", path}, func() (err error) { symlink, err = s.host.IsSymlink(ctx, path); return })
	return symlink, err
}

func (s *stepHost) Close() error { return nil }

// Check is not a step: it changes nothing on the host.
func (s *stepHost) Check(ctx context.Context) error { return s.host.Check(ctx) }
