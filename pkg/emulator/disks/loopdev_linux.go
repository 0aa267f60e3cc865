package disks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Where the kernel exposes loop devices.
const (
	sysBlockDir     = "/sys/block"
	devDir          = "/dev"
	loopControlPath = "/dev/loop-control"
)

// maxFreeLoopAttempts bounds how often attachLoop retries when another
// process binds the free loop device it was handed before it could.
const maxFreeLoopAttempts = 64

// loopDevice is a bound loop device as sysfs describes it.
type loopDevice struct {
	// name is the kernel name, loopN.
	name string
	// number is N, for ordering.
	number int
	// backingFile is the file the device reads and writes, as the kernel
	// prints it (with " (deleted)" once the file was removed).
	backingFile string
	// autoclear is set when the device goes away on its last close: a
	// forced detach of a busy device leaves it so until it is unmounted.
	autoclear bool
}

// path is the device node.
func (d loopDevice) path() string { return filepath.Join(devDir, d.name) }

// loopNumber returns N for a kernel name loopN (and not for partitions such
// as loop0p1).
func loopNumber(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "loop")
	if !ok || digits == "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil && n >= 0
}

// loopNumberFromPath returns N for a device path /dev/loopN.
func loopNumberFromPath(path string) (int, bool) {
	if filepath.Dir(path) != devDir {
		return 0, false
	}
	return loopNumber(filepath.Base(path))
}

// readLoopDevice reads a loop device's binding from sysfs; ok is false when
// the device does not exist or is not bound to a file.
func readLoopDevice(name string) (loopDevice, bool, error) {
	n, isLoop := loopNumber(name)
	if !isLoop {
		return loopDevice{}, false, nil
	}
	dir := filepath.Join(sysBlockDir, name, "loop")
	backing, err := os.ReadFile(filepath.Join(dir, "backing_file"))
	if loopGone(err) {
		return loopDevice{}, false, nil
	}
	if err != nil {
		return loopDevice{}, false, fmt.Errorf("read backing file of %s: %w", name, err)
	}
	autoclear, err := os.ReadFile(filepath.Join(dir, "autoclear"))
	if loopGone(err) {
		// Unbound or removed between the two reads.
		return loopDevice{}, false, nil
	}
	if err != nil {
		return loopDevice{}, false, fmt.Errorf("read autoclear flag of %s: %w", name, err)
	}
	return loopDevice{
		name:        name,
		number:      n,
		backingFile: strings.TrimSuffix(string(backing), "\n"),
		autoclear:   strings.TrimSpace(string(autoclear)) == "1",
	}, true, nil
}

// loopGone reports whether a sysfs read failed because the loop device is
// not bound or no longer exists. Loop devices belong to the whole machine:
// another program (or another test) may unbind or remove one while it is
// being read, and sysfs then answers ENOENT, or ENXIO/ENODEV for a device in
// the middle of its removal. Such a device is simply not one of ours.
func loopGone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENODEV)
}

// listLoopDevices returns every bound loop device on the machine, ordered by
// number.
func listLoopDevices() ([]loopDevice, error) {
	entries, err := os.ReadDir(sysBlockDir)
	if err != nil {
		return nil, fmt.Errorf("list block devices: %w", err)
	}
	var devs []loopDevice
	for _, e := range entries {
		d, ok, err := readLoopDevice(e.Name())
		if err != nil {
			return nil, err
		}
		if ok {
			devs = append(devs, d)
		}
	}
	slices.SortFunc(devs, func(a, b loopDevice) int { return a.number - b.number })
	return devs, nil
}

// checkLoopSupport fails when this process cannot make loop devices (not
// root, no loop driver, or a container without /dev/loop-control).
func checkLoopSupport() error {
	f, err := os.OpenFile(loopControlPath, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("loop devices unavailable (the loop store needs root and %s; use --no-devices otherwise): %w", loopControlPath, err)
	}
	return f.Close()
}

// attachLoop binds a free loop device to the image file and returns the
// device's kernel name. The device scans partitions, as an NVMe disk does.
// LOOP_CONFIGURE needs Linux 5.8 or later.
func attachLoop(imagePath string) (string, error) {
	img, err := os.OpenFile(imagePath, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open volume image: %w", err)
	}
	defer img.Close()
	ctl, err := os.OpenFile(loopControlPath, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", loopControlPath, err)
	}
	defer ctl.Close()

	cfg := unix.LoopConfig{Fd: uint32(img.Fd()), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_PARTSCAN}}
	copy(cfg.Info.File_name[:unix.LO_NAME_SIZE-1], imagePath)
	for range maxFreeLoopAttempts {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("find a free loop device: %w", err)
		}
		name := "loop" + strconv.Itoa(n)
		dev, err := openLoopNode(name, unix.O_RDWR)
		if err != nil {
			return "", err
		}
		err = unix.IoctlLoopConfigure(dev, &cfg)
		_ = unix.Close(dev)
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return "", fmt.Errorf("bind %s to %s: %w", name, imagePath, err)
		}
		// Another process bound the device between LOOP_CTL_GET_FREE and
		// LOOP_CONFIGURE; ask for the next free one.
	}
	return "", fmt.Errorf("bind a loop device to %s: every free device was taken by another process %d times", imagePath, maxFreeLoopAttempts)
}

// openLoopNode opens /dev/loopN, creating the node from sysfs when /dev is
// not a devtmpfs that did so already (some containers).
func openLoopNode(name string, flags int) (int, error) {
	path := filepath.Join(devDir, name)
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		if err := mknodFromSysfs(name, path); err != nil {
			return -1, err
		}
		fd, err = unix.Open(path, flags|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	return fd, nil
}

// mknodFromSysfs creates a block device node with the numbers sysfs gives.
func mknodFromSysfs(name, path string) error {
	major, minor, err := deviceNumbers(filepath.Join(sysBlockDir, name))
	if err != nil {
		return err
	}
	err = unix.Mknod(path, unix.S_IFBLK|0o660, int(unix.Mkdev(uint32(major), uint32(minor))))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("create device node %s: %w", path, err)
	}
	return nil
}

// deviceNumbers reads "major:minor" from a sysfs block device directory.
func deviceNumbers(sysDir string) (major, minor int, err error) {
	b, err := os.ReadFile(filepath.Join(sysDir, "dev"))
	if err != nil {
		return 0, 0, fmt.Errorf("read device numbers: %w", err)
	}
	maj, min, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
	if ok {
		major, err1 := strconv.Atoi(maj)
		minor, err2 := strconv.Atoi(min)
		if err1 == nil && err2 == nil {
			return major, minor, nil
		}
	}
	return 0, 0, fmt.Errorf("malformed device numbers %q in %s", b, sysDir)
}

// loopSizeBytes is the capacity the kernel currently gives a loop device.
func loopSizeBytes(name string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(sysBlockDir, name, "size"))
	if err != nil {
		return 0, fmt.Errorf("read size of %s: %w", name, err)
	}
	sectors, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse size of %s: %w", name, err)
	}
	return sectors * sectorSize, nil
}

// setLoopCapacity makes a loop device re-read its backing file's size, so a
// grown volume grows on the host while it stays attached and mounted.
func setLoopCapacity(name string) error {
	fd, err := openLoopNode(name, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, unix.LOOP_SET_CAPACITY, 0); err != nil {
		return fmt.Errorf("grow %s: %w", name, err)
	}
	return nil
}

// detachLoop unbinds a loop device that is bound to imagePath. Without force
// it fails with ErrBusy while the device (or one of its partitions) is
// mounted, claimed by a holder such as device-mapper, or open exclusively —
// all of which make an exclusive open fail — and it keeps the device open
// exclusively itself while it unbinds, so nothing can mount it in between.
// With force a busy device is unbound lazily (lazy is true): the kernel sets
// autoclear and frees the device on its last close, so a filesystem still
// mounted on it keeps using the image until it is unmounted. A device that is
// gone, or bound to another file by now, is left alone.
func detachLoop(d loopDevice, imagePath string, force bool) (lazy bool, err error) {
	fd, err := openLoopNode(d.name, unix.O_RDWR|unix.O_EXCL)
	if errors.Is(err, unix.EBUSY) {
		if !force {
			return false, fmt.Errorf("%w: %s %s", ErrBusy, d.path(), busyReason(d.name))
		}
		lazy = true
		fd, err = openLoopNode(d.name, unix.O_RDWR)
	}
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	// Re-check the binding now that the device is open: never unbind a
	// device that stopped being ours since it was listed.
	cur, ok, err := readLoopDevice(d.name)
	if err != nil {
		return false, err
	}
	if !ok || strings.TrimSuffix(cur.backingFile, deletedSuffix) != imagePath {
		return false, nil
	}
	if err := unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return false, fmt.Errorf("unbind %s: %w", d.path(), err)
	}
	return lazy, nil
}

// deviceHolders lists the devices stacked on a disk or its partitions
// (device-mapper, md).
func deviceHolders(name string) []string {
	var holders []string
	dirs, _ := filepath.Glob(filepath.Join(sysBlockDir, name, name+"p*", "holders"))
	dirs = append(dirs, filepath.Join(sysBlockDir, name, "holders"))
	for _, dir := range dirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			holders = append(holders, e.Name())
		}
	}
	return holders
}

// busyReason says, for the ErrBusy message, why a device cannot be opened
// exclusively: where it is mounted in this mount namespace, what holds it,
// or else that some process has it open.
func busyReason(name string) string {
	sysDirs, _ := filepath.Glob(filepath.Join(sysBlockDir, name, name+"p*"))
	sysDirs = append(sysDirs, filepath.Join(sysBlockDir, name))
	type devno struct{ major, minor int }
	nums := map[devno]bool{}
	for _, dir := range sysDirs {
		if major, minor, err := deviceNumbers(dir); err == nil {
			nums[devno{major, minor}] = true
		}
	}
	mounts, _ := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !nums[devno{m.Major, m.Minor}], false
	})
	if len(mounts) > 0 {
		points := make([]string, 0, len(mounts))
		for _, m := range mounts {
			points = append(points, m.Mountpoint)
		}
		return "is mounted at " + strings.Join(points, ", ")
	}
	if holders := deviceHolders(name); len(holders) > 0 {
		return "is held by " + strings.Join(holders, ", ")
	}
	return "is open exclusively (mounted in another mount namespace, or in use by a process)"
}
