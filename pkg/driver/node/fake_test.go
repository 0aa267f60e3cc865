package node

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/diskplane/diskplane/pkg/mounter"
)

// fakeOS is an in-memory node OS: paths, devices with the filesystems on
// them, and a mount table. It records every call that changes something, so
// tests can assert what happened, and what did not.
type fakeOS struct {
	mu sync.Mutex

	platform mounter.Platform // what the OS can do: Linux's unless a test plays Windows

	devices     map[string]string // volume ID -> device node
	wrongDevice map[string]bool   // volume ID -> FindDevice refuses its device
	formats     map[string]string // device -> filesystem on it ("" = blank)
	deviceSizes map[string]int64  // device -> bytes
	fsSizes     map[string]int64  // device -> bytes the filesystem spans
	paths       map[string]string // existing path -> "dir" or "file"
	mounts      map[string]fakeMount
	readOnlyFS  map[string]bool // device -> its filesystem was remounted read-only
	corrupted   map[string]bool // path -> its mount is corrupted
	stats       map[string]mounter.Stats
	nvmeStore   int
	failOn      map[string]error // method -> error it returns

	luksKeys map[string]string // device -> passphrase of the LUKS header on it
	mappings map[string]string // volume ID -> device its open mapping sits on

	// findEntered, when set, receives once FindDevice is entered; FindDevice
	// then waits until findRelease is closed.
	findEntered chan struct{}
	findRelease chan struct{}

	calls []string
}

type fakeMount struct {
	source  string
	fsType  string
	options []string
}

func newFakeOS() *fakeOS {
	return &fakeOS{
		devices: map[string]string{}, wrongDevice: map[string]bool{}, formats: map[string]string{},
		deviceSizes: map[string]int64{}, fsSizes: map[string]int64{}, paths: map[string]string{},
		mounts: map[string]fakeMount{}, readOnlyFS: map[string]bool{}, corrupted: map[string]bool{}, stats: map[string]mounter.Stats{},
		failOn: map[string]error{}, platform: mounter.LinuxPlatform, luksKeys: map[string]string{}, mappings: map[string]string{},
	}
}

func (f *fakeOS) Platform() mounter.Platform { return f.platform }

// addVolume makes volumeID's device present with size bytes and nothing on it.
func (f *fakeOS) addVolume(volumeID, device string, size int64) {
	f.devices[volumeID] = device
	f.deviceSizes[device] = size
	f.formats[device] = ""
}

func (f *fakeOS) record(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

// recorded returns the calls so far that start with prefix.
func (f *fakeOS) recorded(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

func corruptedErr(path string) error {
	return &os.PathError{Op: "stat", Path: path, Err: corruptedErrno}
}

func (f *fakeOS) FindDevice(ctx context.Context, volumeID, hint string) (string, error) {
	if f.findEntered != nil {
		f.findEntered <- struct{}{}
		<-f.findRelease
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["FindDevice"]; err != nil {
		return "", err
	}
	if f.wrongDevice[volumeID] {
		return "", fmt.Errorf("%w: serial mismatch", mounter.ErrWrongDevice)
	}
	dev, ok := f.devices[volumeID]
	if !ok {
		return "", fmt.Errorf("%w: %s", mounter.ErrDeviceNotFound, volumeID)
	}
	return dev, nil
}

func (f *fakeOS) VerifyDevice(volumeID, devicePath string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.devices[volumeID] == devicePath {
		return nil
	}
	if under, open := f.mappings[volumeID]; open && devicePath == fakeMapping(volumeID) && under == f.devices[volumeID] {
		return nil
	}
	return fmt.Errorf("%w: %s is not %s", mounter.ErrWrongDevice, devicePath, volumeID)
}

func (f *fakeOS) PathExists(path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.corrupted[path] {
		return false, corruptedErr(path)
	}
	_, ok := f.paths[path]
	return ok, nil
}

func (f *fakeOS) MakeDir(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["MakeDir"]; err != nil {
		return err
	}
	f.record("MakeDir %s", path)
	f.paths[path] = "dir"
	return nil
}

func (f *fakeOS) MakeFile(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("MakeFile %s", path)
	f.paths[path] = "file"
	return nil
}

func (f *fakeOS) IsMountPoint(path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.corrupted[path] {
		return false, corruptedErr(path)
	}
	if _, ok := f.paths[path]; !ok {
		return false, &os.PathError{Op: "stat", Path: path, Err: fs.ErrNotExist}
	}
	_, ok := f.mounts[path]
	return ok, nil
}

// deviceOf follows bind mounts down to the device, as /proc/mounts shows it.
func (f *fakeOS) deviceOf(path string) string {
	for {
		m, ok := f.mounts[path]
		if !ok {
			return path
		}
		path = m.source
	}
}

func (f *fakeOS) MountedDevice(path string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.mounts[path]; !ok {
		return "", nil
	}
	return f.deviceOf(path), nil
}

// MountRefs lists the mounts bound from path: bind mounts of a staging
// directory, or of a device node.
func (f *fakeOS) MountRefs(path string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["MountRefs"]; err != nil {
		return nil, err
	}
	var refs []string
	for p, m := range f.mounts {
		if m.source == path {
			refs = append(refs, p)
		}
	}
	return refs, nil
}

func (f *fakeOS) MountedReadOnly(path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["MountedReadOnly"]; err != nil {
		return false, err
	}
	m, ok := f.mounts[path]
	if !ok {
		return false, &os.PathError{Op: "mountinfo", Path: path, Err: fs.ErrNotExist}
	}
	return slices.Contains(m.options, "ro"), nil
}

func (f *fakeOS) FormatAndMount(_, device, target, fsType string, mkfsArgs, mountOptions []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["FormatAndMount"]; err != nil {
		return err
	}
	switch existing := f.formats[device]; existing {
	case "":
		f.record("mkfs.%s %s %s", fsType, strings.Join(mkfsArgs, " "), device)
		f.formats[device] = fsType
		f.fsSizes[device] = f.deviceSizes[device]
	case fsType:
	default:
		return fmt.Errorf("%w: %s holds %s", mounter.ErrFilesystemMismatch, device, existing)
	}
	f.record("mount -t %s -o %s %s %s", fsType, strings.Join(mountOptions, ","), device, target)
	f.mounts[target] = fakeMount{source: device, fsType: fsType, options: mountOptions}
	return nil
}

// RemountFilesystem sets the read-only flag of the filesystem mounted at
// path, which every mount of it shows (filesystemReadOnly), not in any
// mount's own options (MountedReadOnly), as the kernel keeps them apart.
func (f *fakeOS) RemountFilesystem(path string, readOnly bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["RemountFilesystem"]; err != nil {
		return err
	}
	m, ok := f.mounts[path]
	if !ok {
		return &os.PathError{Op: "remount", Path: path, Err: fs.ErrNotExist}
	}
	mode := "rw"
	if readOnly {
		mode = "ro"
	}
	f.record("mount -o remount,%s %s", mode, path)
	f.readOnlyFS[m.source] = readOnly
	return nil
}

// filesystemReadOnly reports whether writes through the mount at path
// fail: its own options say ro, or its filesystem (that of the mount it
// binds) was remounted read-only.
func (f *fakeOS) filesystemReadOnly(path string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.mounts[path]
	if !ok {
		return false
	}
	if slices.Contains(m.options, "ro") {
		return true
	}
	device := m.source
	if bound, ok := f.mounts[m.source]; ok {
		device = bound.source
	}
	return f.readOnlyFS[device]
}

func (f *fakeOS) BindMount(source, target string, options []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["BindMount"]; err != nil {
		return err
	}
	if _, ok := f.paths[target]; !ok {
		return fmt.Errorf("bind mount: %s does not exist", target)
	}
	f.record("bind -o %s %s %s", strings.Join(options, ","), source, target)
	f.mounts[target] = fakeMount{source: source, options: options}
	return nil
}

func (f *fakeOS) Unmount(target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["Unmount"]; err != nil {
		return err
	}
	if _, ok := f.mounts[target]; !ok && !f.corrupted[target] {
		return fmt.Errorf("umount %s: not mounted", target)
	}
	f.record("umount %s", target)
	delete(f.mounts, target)
	delete(f.corrupted, target)
	return nil
}

func (f *fakeOS) CleanupMountPoint(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["CleanupMountPoint"]; err != nil {
		return err
	}
	if _, ok := f.mounts[path]; ok || f.corrupted[path] {
		f.record("umount %s", path)
		delete(f.mounts, path)
		delete(f.corrupted, path)
	}
	if _, ok := f.paths[path]; ok {
		f.record("remove %s", path)
		delete(f.paths, path)
	}
	return nil
}

func (f *fakeOS) NeedResize(device, mountPath string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fsSizes[device] < f.deviceSizes[device], nil
}

func (f *fakeOS) Resize(device, mountPath string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["Resize"]; err != nil {
		return err
	}
	f.record("resize %s %s", device, mountPath)
	f.fsSizes[device] = f.deviceSizes[device]
	return nil
}

func (f *fakeOS) DeviceSize(path string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn["DeviceSize"]; err != nil {
		return 0, err
	}
	size, ok := f.deviceSizes[f.deviceOf(path)]
	if !ok {
		return 0, fmt.Errorf("%s is not a block device", path)
	}
	return size, nil
}

func (f *fakeOS) IsBlockDevice(path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.deviceSizes[path]; ok {
		return true, nil
	}
	m, ok := f.mounts[path]
	if !ok {
		return false, nil
	}
	_, isDev := f.deviceSizes[m.source]
	return isDev && f.paths[path] == "file", nil
}

func (f *fakeOS) FilesystemStats(path string) (mounter.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.stats[f.deviceOf(path)]
	if !ok {
		return mounter.Stats{}, fmt.Errorf("no filesystem at %s", path)
	}
	return st, nil
}

func (f *fakeOS) InstanceStoreVolumes() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nvmeStore, f.failOn["InstanceStoreVolumes"]
}

// mountedAt returns the mount at path, if any.
func (f *fakeOS) mountedAt(path string) (fakeMount, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.mounts[path]
	return m, ok
}
