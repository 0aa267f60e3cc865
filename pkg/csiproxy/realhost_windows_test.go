package csiproxy_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"github.com/diskplane/diskplane/pkg/csiproxy"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// disposableDiskEnv names a disk of a real Windows machine that
// TestWindowsHostAPIs may bring online, partition, format, mount and take
// offline: whatever it holds is lost. Without it the test only reads.
const disposableDiskEnv = "DISKPLANE_TEST_DISPOSABLE_DISK"

// outcome is what a call of the real host layer came to, as a test can
// tell it.
type outcome string

const (
	// works: the call succeeded and did what it says.
	works outcome = "works"
	// stub: the call succeeded with a zero answer and changed nothing. Under
	// Wine 8.0 it ended in a stub: powershell.exe runs no command, prints
	// nothing and exits 0; CreateSymbolicLinkW creates nothing and reports
	// success.
	stub outcome = "succeeds, does nothing (Wine's stub)"
	// noAnswer: the call failed because the library could not read
	// PowerShell's output, which was empty.
	noAnswer outcome = "fails: PowerShell printed nothing"
	// notExist: the call failed with fs.ErrNotExist.
	notExist outcome = "fails: the path does not exist"
	// invalidFunction: the call failed with ERROR_INVALID_FUNCTION.
	invalidFunction outcome = "fails: ERROR_INVALID_FUNCTION"
	// otherFailure is any other error.
	otherFailure outcome = "fails otherwise"
)

// failure classifies err, which is not nil. The library's PowerShell code
// formats its errors with %v, so an empty output is recognised by what it
// says: the output it quotes is empty, or JSON decoding met no input.
func failure(err error) outcome {
	msg := err.Error()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return notExist
	case errors.Is(err, windows.ERROR_INVALID_FUNCTION):
		return invalidFunction
	case strings.Contains(msg, "output: , ") || strings.Contains(msg, "unexpected end of JSON input"):
		return noAnswer
	}
	return otherFailure
}

// underWine reports whether this Windows program runs under Wine, whose
// ntdll.dll exports wine_get_version.
func underWine() bool {
	return windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil
}

// realHost is the state the steps of TestWindowsHostAPIs share.
type realHost struct {
	host   csiproxy.Host
	disk   uint32 // the disk written to
	volume string // the volume asked about and written to
	dir    string
}

func (r *realHost) path(name string) string { return filepath.Join(r.dir, name) }

// step is one call of Diskplane's Host over the library's real host layer.
type step struct {
	name string
	// writes: the call may change a disk, so on a real Windows it runs only
	// on the disk disposableDiskEnv names.
	writes bool
	call   func(ctx context.Context, r *realHost) (any, error)
	// wine is what the call comes to under Wine 8.0; want is its answer when
	// it succeeds there, and after, if set, checks what it left.
	wine  outcome
	want  any
	after func(ctx context.Context, r *realHost) error
}

// TestWindowsHostAPIs runs every operation Diskplane's node asks of the
// host through the csi-proxy v2 library's fronts over its real host layer
// (WindowsHostAPIs: PowerShell's storage cmdlets, Go's os package, and
// \\.\PhysicalDriveN for raw reads), not over the emulated host. Under Wine
// it asserts exactly what each call comes to (the table below, written down
// in docs/windows.md), so that a Wine or library change that makes a call
// newly work or newly fail is noticed. On a real Windows it only logs what
// each call did: it reads disk 0 and writes nothing but directories below a
// temporary one, unless DISKPLANE_TEST_DISPOSABLE_DISK names a disk it may
// wipe.
func TestWindowsHostAPIs(t *testing.T) {
	wine := underWine()
	r := &realHost{dir: testutil.TempDir(t), volume: `\\?\Volume{00000000-0000-0000-0000-000000000000}\`, disk: 1}
	writes := wine
	if v := os.Getenv(disposableDiskEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			t.Fatalf("%s=%q: want the number of a disk other than the boot disk", disposableDiskEnv, v)
		}
		r.disk, writes = uint32(n), true
	}
	host, err := csiproxy.NewLibraryUnchecked(csiproxy.WindowsHostAPIs())
	if err != nil {
		t.Fatal(err)
	}
	r.host = host
	ctx := context.Background()

	staging := `staging\globalmount` // Mkdir makes its parent too
	steps := []step{
		{name: "ListDiskIDs", wine: noAnswer, call: func(ctx context.Context, r *realHost) (any, error) {
			return r.host.ListDiskIDs(ctx)
		}},
		{name: "Rescan", wine: stub, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.Rescan(ctx)
		}},
		{name: "DiskSize (GetDiskStats) of disk 0", wine: noAnswer, call: func(ctx context.Context, r *realHost) (any, error) {
			return r.host.DiskSize(ctx, 0)
		}},
		{name: "ReadDisk of disk 0 (the raw reader)", wine: invalidFunction, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.ReadDisk(ctx, 0, 0, make([]byte, 512))
		}},
		// The library answers one empty ID for PowerShell's empty output;
		// the Host drops it.
		{name: "VolumesOnDisk of disk 0", wine: stub, want: []string{}, call: func(ctx context.Context, r *realHost) (any, error) {
			ids, err := r.host.VolumesOnDisk(ctx, 0)
			if len(ids) > 0 && !writes {
				r.volume = ids[0]
			}
			return ids, err
		}},
		{name: "SetDiskOnline (SetDiskState) true", writes: true, wine: stub, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.SetDiskOnline(ctx, r.disk, true)
		}},
		{name: "PartitionDisk", writes: true, wine: stub, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.PartitionDisk(ctx, r.disk)
		}},
		{name: "VolumesOnDisk of the disk partitioned", writes: true, wine: stub, want: []string{}, call: func(ctx context.Context, r *realHost) (any, error) {
			ids, err := r.host.VolumesOnDisk(ctx, r.disk)
			if len(ids) > 0 {
				r.volume = ids[0]
			}
			return ids, err
		}},
		{name: "IsVolumeFormatted", wine: stub, want: false, call: func(ctx context.Context, r *realHost) (any, error) {
			return r.host.IsVolumeFormatted(ctx, r.volume)
		}},
		{name: "FormatVolume", writes: true, wine: stub, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.FormatVolume(ctx, r.volume)
		}},
		{name: "Mkdir", wine: works, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.Mkdir(ctx, r.path(staging))
		}, after: isDir(staging)},
		{name: "MountVolume", writes: true, wine: stub, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.MountVolume(ctx, r.volume, r.path(staging))
		}, after: notMounted(staging)},
		{name: "IsSymlink of the staging directory", wine: works, want: false, call: func(ctx context.Context, r *realHost) (any, error) {
			return r.host.IsSymlink(ctx, r.path(staging))
		}},
		{name: "VolumeAt (GetVolumeIDFromTargetPath)", wine: noAnswer, call: func(ctx context.Context, r *realHost) (any, error) {
			return r.host.VolumeAt(ctx, r.path(staging))
		}},
		{name: "VolumeStats (GetVolumeStats)", wine: noAnswer, call: func(ctx context.Context, r *realHost) (any, error) {
			total, used, err := r.host.VolumeStats(ctx, r.volume)
			return [2]int64{total, used}, err
		}},
		{name: "DiskOfVolume (GetDiskNumberFromVolumeID)", wine: noAnswer, call: func(ctx context.Context, r *realHost) (any, error) {
			return r.host.DiskOfVolume(ctx, r.volume)
		}},
		{name: "ResizeVolume", writes: true, wine: noAnswer, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.ResizeVolume(ctx, r.volume)
		}},
		{name: "CreateSymlink", wine: stub, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.CreateSymlink(ctx, r.path(staging), r.path("publish"))
		}, after: missing("publish")},
		{name: "IsSymlink of the symlink", wine: notExist, call: func(ctx context.Context, r *realHost) (any, error) {
			return r.host.IsSymlink(ctx, r.path("publish"))
		}},
		{name: "Rmdir of the symlink", wine: notExist, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.Rmdir(ctx, r.path("publish"))
		}},
		{name: "UnmountVolume", writes: true, wine: stub, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.UnmountVolume(ctx, r.volume, r.path(staging))
		}},
		{name: "SetDiskOnline (SetDiskState) false", writes: true, wine: stub, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.SetDiskOnline(ctx, r.disk, false)
		}},
		{name: "PathExists of the staging directory", wine: works, want: true, call: func(ctx context.Context, r *realHost) (any, error) {
			return r.host.PathExists(ctx, r.path(staging))
		}},
		{name: "PathExists of nothing", wine: works, want: false, call: func(ctx context.Context, r *realHost) (any, error) {
			return r.host.PathExists(ctx, r.path("nothing"))
		}},
		// As Host says: a path that does not exist is an error.
		{name: "IsSymlink of nothing", wine: notExist, call: func(ctx context.Context, r *realHost) (any, error) {
			return r.host.IsSymlink(ctx, r.path("nothing"))
		}},
		{name: "Rmdir of the staging directory", wine: works, call: func(ctx context.Context, r *realHost) (any, error) {
			return nil, r.host.Rmdir(ctx, r.path(staging))
		}, after: missing(staging)},
	}

	start := time.Now()
	for _, s := range steps {
		if s.writes && !writes {
			t.Logf("%-45s skipped: it writes a disk; set %s to a disk that may be wiped", s.name, disposableDiskEnv)
			continue
		}
		began := time.Now()
		answer, err := s.call(ctx, r)
		took := time.Since(began).Round(time.Millisecond)
		got := works
		if err != nil {
			got = failure(err)
			t.Logf("%-45s %s (%v): %v", s.name, got, took, err)
		} else {
			t.Logf("%-45s succeeded (%v): %#v", s.name, took, answer)
		}
		if !wine {
			continue
		}
		if err == nil && s.wine == stub {
			got = stub
		}
		if got != s.wine {
			t.Errorf("%s under Wine: %s (%v), want %s: update the table here and in docs/windows.md", s.name, got, err, s.wine)
			continue
		}
		if err == nil && s.want != nil && !reflect.DeepEqual(answer, s.want) {
			t.Errorf("%s under Wine answered %#v, want %#v", s.name, answer, s.want)
		}
		if err == nil && s.after != nil {
			if err := s.after(ctx, r); err != nil {
				t.Errorf("after %s under Wine: %v", s.name, err)
			}
		}
	}
	t.Logf("%d steps in %v", len(steps), time.Since(start).Round(time.Millisecond))
}

// isDir checks that the step made a directory at name.
func isDir(name string) func(context.Context, *realHost) error {
	return func(_ context.Context, r *realHost) error {
		fi, err := os.Stat(r.path(name))
		if err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
		return err
	}
}

// missing checks that nothing is at name (Wine's CreateSymbolicLinkW
// reports success and makes nothing).
func missing(name string) func(context.Context, *realHost) error {
	return func(ctx context.Context, r *realHost) error {
		if exists, err := r.host.PathExists(ctx, r.path(name)); err != nil || exists {
			return errors.New("PathExists(" + name + ") = " + strconv.FormatBool(exists) + ", want false")
		}
		return nil
	}
}

// notMounted checks that the directory at name is still a plain directory.
func notMounted(name string) func(context.Context, *realHost) error {
	return func(ctx context.Context, r *realHost) error {
		if is, err := r.host.IsSymlink(ctx, r.path(name)); err != nil || is {
			return errors.New("IsSymlink(" + name + ") = " + strconv.FormatBool(is) + ", want false: nothing mounted")
		}
		return nil
	}
}

// TestNewLibraryOverWindows checks the start check of a HostProcess plugin
// over Windows' own host APIs: under Wine, whose powershell.exe prints
// nothing, it refuses at once (ErrNotServed, naming the empty answer)
// rather than starting a plugin that fails every stage; on a real Windows
// it must pass.
func TestNewLibraryOverWindows(t *testing.T) {
	start := time.Now()
	host, err := csiproxy.NewLibrary(context.Background(), csiproxy.WindowsHostAPIs())
	took := time.Since(start).Round(time.Millisecond)
	if !underWine() {
		if err != nil {
			t.Fatalf("NewLibrary on Windows (%v): %v", took, err)
		}
		t.Logf("NewLibrary on Windows passed in %v", took)
		must(t, host.Close())
		return
	}
	if !errors.Is(err, csiproxy.ErrNotServed) || failure(err) != noAnswer || !strings.Contains(err.Error(), "PowerShell") {
		t.Fatalf("NewLibrary under Wine = %v, want ErrNotServed naming PowerShell and its empty answer", err)
	}
	t.Logf("NewLibrary under Wine refused in %v: %v", took, err)
}

// TestWinsymlinkIsOff checks that this module's Windows programs are built
// with winsymlink=0 (go.mod's godebug line): the library's IsSymlink tells
// a volume mount point, a staged volume, by os.Lstat's ModeSymlink, which Go
// 1.23 and later set for one only then. Wine 8.0 makes no mount points, so
// the behaviour itself cannot be seen here.
func TestWinsymlinkIsOff(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information")
	}
	for _, s := range info.Settings {
		if s.Key == "DefaultGODEBUG" {
			for _, setting := range strings.Split(s.Value, ",") {
				if setting == "winsymlink=0" {
					return
				}
			}
			t.Fatalf("DefaultGODEBUG=%s, want winsymlink=0 in it", s.Value)
		}
	}
	t.Fatal("no DefaultGODEBUG in the build information, want winsymlink=0")
}
