package disks

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/guestagent"
)

// What EBS volumes look like on a Nitro instance: an NVMe controller with
// this model whose serial number is the volume ID without its dash.
const ebsNVMeModel = "Amazon Elastic Block Store"

// The NVMe/TCP target the guest agent exposes volumes through, on the
// guest's own loopback: Debian's kernel has no loop transport, and TCP over
// loopback costs a fraction of a millisecond per request.
const (
	nvmetPortID  = "1"
	nvmetAddress = "127.0.0.1"
	nvmetService = "4420"
	// nqnPrefix starts the NVMe Qualified Name of each volume's subsystem;
	// the volume ID ends it.
	nqnPrefix = "nqn.2026-11.io.diskplane.ec2-emulator:"
)

// namespaceWait bounds how long Attach waits for the kernel to create the
// namespace's block device after connecting to the target.
const namespaceWait = 10 * time.Second

// nvmeTarget exposes volume images as NVMe namespaces, the way EBS volumes
// appear on a Nitro instance, through the kernel's NVMe target (nvmet) and
// its NVMe/TCP host driver on the loopback: each volume is a subsystem whose
// serial number and model are those of EBS, with one namespace on a loop
// device over the image, and this machine connects to it as an NVMe host.
// The kernel names the controllers (nvme0, nvme1 …) in the order they are
// connected, so the names follow the order of attachment, as on EC2, and
// never the device name the API reported. It runs inside the VM that plays
// the instance (hack/vm), as root, with the nvmet, nvmet-tcp and nvme-tcp
// modules loaded and configfs mounted.
type nvmeTarget struct {
	configDir string // nvmet's configfs directory
	classDir  string // /sys/class/nvme
	fabrics   string // the NVMe over Fabrics control device
	locks     keyedMutex
}

// NewNVMeTarget returns the guest agent's Exposer on this machine's kernel
// NVMe target, and sets up the TCP port it serves volumes on. It fails at
// once when the kernel lacks the target or the NVMe/TCP host driver.
func NewNVMeTarget() (guestagent.Exposer, error) {
	t := &nvmeTarget{configDir: "/sys/kernel/config/nvmet", classDir: "/sys/class/nvme", fabrics: "/dev/nvme-fabrics"}
	if _, err := os.Stat(t.configDir); err != nil {
		return nil, fmt.Errorf("the kernel's NVMe target is not available (load nvmet and nvmet-tcp, mount configfs): %w", err)
	}
	if _, err := os.Stat(t.fabrics); err != nil {
		return nil, fmt.Errorf("the NVMe over Fabrics host is not available (load nvme-tcp): %w", err)
	}
	if err := t.ensurePort(); err != nil {
		return nil, err
	}
	return t, nil
}

// ensurePort makes the target's TCP port on the loopback, once.
func (t *nvmeTarget) ensurePort() error {
	port := filepath.Join(t.configDir, "ports", nvmetPortID)
	if err := os.Mkdir(port, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create the NVMe target port: %w", err)
	}
	for attr, value := range map[string]string{"addr_trtype": "tcp", "addr_adrfam": "ipv4", "addr_traddr": nvmetAddress, "addr_trsvcid": nvmetService} {
		if err := writeAttr(filepath.Join(port, attr), value); err != nil {
			return fmt.Errorf("configure the NVMe target port: %w", err)
		}
	}
	return nil
}

// subsystemDir is the configfs directory of a volume's subsystem.
func (t *nvmeTarget) subsystemDir(volumeID string) string {
	return filepath.Join(t.configDir, "subsystems", nqnPrefix+volumeID)
}

// Attach implements guestagent.Exposer. Every step looks first at what is
// there, so a call repeated after a crash half way completes the rest.
func (t *nvmeTarget) Attach(volumeID, image string) (guestagent.Disk, error) {
	if err := guestagent.ValidateVolumeID(volumeID); err != nil {
		return guestagent.Disk{}, err
	}
	defer t.locks.lock(volumeID)()
	image, err := filepath.EvalSymlinks(image)
	if err != nil {
		return guestagent.Disk{}, fmt.Errorf("attach volume %s: image: %w", volumeID, err)
	}
	loop, err := t.loopFor(image)
	if err != nil {
		return guestagent.Disk{}, fmt.Errorf("attach volume %s: %w", volumeID, err)
	}
	if err := t.ensureSubsystem(volumeID, loop); err != nil {
		return guestagent.Disk{}, fmt.Errorf("attach volume %s: %w", volumeID, err)
	}
	ctrl, err := t.controllerOf(volumeID)
	if err != nil {
		return guestagent.Disk{}, err
	}
	if ctrl == "" {
		if ctrl, err = t.connect(volumeID); err != nil {
			return guestagent.Disk{}, fmt.Errorf("attach volume %s: %w", volumeID, err)
		}
	}
	dev, err := t.waitNamespace(ctrl)
	if err != nil {
		return guestagent.Disk{}, fmt.Errorf("attach volume %s: %w", volumeID, err)
	}
	klog.V(2).InfoS("Exposed volume as NVMe", "volumeID", volumeID, "controller", ctrl, "device", dev, "loop", loop)
	return guestagent.Disk{VolumeID: volumeID, Device: dev}, nil
}

// loopFor returns the loop device bound to image, binding one if none is.
func (t *nvmeTarget) loopFor(image string) (string, error) {
	devs, err := listLoopDevices()
	if err != nil {
		return "", err
	}
	for _, d := range devs {
		if d.backingFile == image && !d.autoclear {
			return d.path(), nil
		}
	}
	name, err := attachLoop(image)
	if err != nil {
		return "", err
	}
	return filepath.Join(devDir, name), nil
}

// ensureSubsystem makes the volume's subsystem — EBS's serial number and
// model, one namespace on the loop device — and serves it on the port.
func (t *nvmeTarget) ensureSubsystem(volumeID, loop string) error {
	sub := t.subsystemDir(volumeID)
	if err := os.Mkdir(sub, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create NVMe subsystem: %w", err)
	}
	for attr, value := range map[string]string{
		"attr_allow_any_host": "1",
		"attr_serial":         strings.Replace(volumeID, "-", "", 1),
		"attr_model":          ebsNVMeModel,
	} {
		if err := writeAttr(filepath.Join(sub, attr), value); err != nil {
			return err
		}
	}
	ns := filepath.Join(sub, "namespaces", "1")
	if err := os.Mkdir(ns, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create NVMe namespace: %w", err)
	}
	if readTrim(filepath.Join(ns, "enable")) == "1" && readTrim(filepath.Join(ns, "device_path")) != loop {
		// Left on another loop device by an earlier life of the agent.
		if err := writeAttr(filepath.Join(ns, "enable"), "0"); err != nil {
			return err
		}
	}
	if readTrim(filepath.Join(ns, "enable")) != "1" {
		if err := writeAttr(filepath.Join(ns, "device_path"), loop); err != nil {
			return err
		}
		if err := writeAttr(filepath.Join(ns, "enable"), "1"); err != nil {
			return err
		}
	}
	link := filepath.Join(t.configDir, "ports", nvmetPortID, "subsystems", nqnPrefix+volumeID)
	if err := os.Symlink(sub, link); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("serve NVMe subsystem on the port: %w", err)
	}
	return nil
}

// controllerOf returns the kernel name (nvmeN) of this machine's controller
// connected to the volume's subsystem, or "".
func (t *nvmeTarget) controllerOf(volumeID string) (string, error) {
	ctrls, err := os.ReadDir(t.classDir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	for _, c := range ctrls {
		if readTrim(filepath.Join(t.classDir, c.Name(), "subsysnqn")) == nqnPrefix+volumeID {
			return c.Name(), nil
		}
	}
	return "", nil
}

// instancePattern finds the controller number in the fabrics device's
// answer to a connect ("instance=3,cntlid=1").
var instancePattern = regexp.MustCompile(`instance=(\d+)`)

// connect connects this machine as an NVMe host to the volume's subsystem
// and returns the new controller's kernel name.
func (t *nvmeTarget) connect(volumeID string) (string, error) {
	f, err := os.OpenFile(t.fabrics, os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", t.fabrics, err)
	}
	defer f.Close()
	opts := fmt.Sprintf("transport=tcp,traddr=%s,trsvcid=%s,nqn=%s%s", nvmetAddress, nvmetService, nqnPrefix, volumeID)
	if _, err := f.Write([]byte(opts)); err != nil {
		return "", fmt.Errorf("connect to the NVMe target: %w", err)
	}
	buf := make([]byte, 256)
	n, err := f.Read(buf)
	if err != nil {
		return "", fmt.Errorf("read the NVMe controller's number: %w", err)
	}
	m := instancePattern.FindSubmatch(buf[:n])
	if m == nil {
		return "", fmt.Errorf("unexpected answer from %s: %q", t.fabrics, buf[:n])
	}
	return "nvme" + string(m[1]), nil
}

// waitNamespace waits for the block device of the controller's namespace
// (nvmeNn1: the VM boots with nvme_core.multipath=N, as EC2's kernels
// present EBS) and its device node, and returns the node's path.
func (t *nvmeTarget) waitNamespace(ctrl string) (string, error) {
	deadline := time.Now().Add(namespaceWait)
	for {
		names, _ := filepath.Glob(filepath.Join(t.classDir, ctrl, ctrl+"n*"))
		if len(names) > 0 {
			dev := filepath.Join(devDir, filepath.Base(names[0]))
			if _, err := os.Stat(dev); err == nil {
				return dev, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("controller %s has no namespace device after %s", ctrl, namespaceWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Detach implements guestagent.Exposer: it disconnects the controller (a
// busy device only with force), then removes the subsystem and unbinds the
// loop device. Each step skips what is gone already.
func (t *nvmeTarget) Detach(volumeID string, force bool) error {
	if err := guestagent.ValidateVolumeID(volumeID); err != nil {
		return err
	}
	defer t.locks.lock(volumeID)()
	ctrl, err := t.controllerOf(volumeID)
	if err != nil {
		return err
	}
	if ctrl != "" {
		if err := t.disconnect(ctrl, force); err != nil {
			return fmt.Errorf("detach volume %s: %w", volumeID, err)
		}
	}
	sub := t.subsystemDir(volumeID)
	ns := filepath.Join(sub, "namespaces", "1")
	loop := readTrim(filepath.Join(ns, "device_path"))
	steps := []func() error{
		func() error {
			return removeIfExists(filepath.Join(t.configDir, "ports", nvmetPortID, "subsystems", nqnPrefix+volumeID))
		},
		func() error {
			if _, err := os.Stat(ns); err != nil {
				return nil
			}
			return writeAttr(filepath.Join(ns, "enable"), "0")
		},
		func() error { return removeIfExists(ns) },
		func() error { return removeIfExists(sub) },
		func() error { return t.unbindLoops(volumeID, loop) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("detach volume %s: %w", volumeID, err)
		}
	}
	klog.V(2).InfoS("Removed volume's NVMe device", "volumeID", volumeID, "controller", ctrl, "forced", force)
	return nil
}

// disconnect removes an NVMe controller. Without force it first proves the
// namespace's device free with an exclusive open, which fails while it is
// mounted, held by device-mapper or open exclusively.
func (t *nvmeTarget) disconnect(ctrl string, force bool) error {
	names, _ := filepath.Glob(filepath.Join(t.classDir, ctrl, ctrl+"n*"))
	for _, n := range names {
		name := filepath.Base(n)
		fd, err := unix.Open(filepath.Join(devDir, name), unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
		if err == nil {
			_ = unix.Close(fd)
			continue
		}
		if errors.Is(err, unix.EBUSY) && !force {
			return fmt.Errorf("%w: %s %s", guestagent.ErrBusy, filepath.Join(devDir, name), busyReason(name))
		}
	}
	err := writeAttr(filepath.Join(t.classDir, ctrl, "delete_controller"), "1")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// unbindLoops unbinds the loop device the namespace used, or, when a crash
// left no namespace to say which, every loop device over the volume's image.
func (t *nvmeTarget) unbindLoops(volumeID, loop string) error {
	devs, err := listLoopDevices()
	if err != nil {
		return err
	}
	for _, d := range devs {
		if d.path() != loop && filepath.Base(strings.TrimSuffix(d.backingFile, deletedSuffix)) != volumeID+imageSuffix {
			continue
		}
		if _, err := detachLoop(d, strings.TrimSuffix(d.backingFile, deletedSuffix), false); err != nil {
			return err
		}
	}
	return nil
}

// Resize implements guestagent.Exposer: the loop device takes the image's
// new size, then the target tells the host the namespace grew.
func (t *nvmeTarget) Resize(volumeID string) error {
	if err := guestagent.ValidateVolumeID(volumeID); err != nil {
		return err
	}
	defer t.locks.lock(volumeID)()
	ns := filepath.Join(t.subsystemDir(volumeID), "namespaces", "1")
	loop := readTrim(filepath.Join(ns, "device_path"))
	if loop == "" {
		return fmt.Errorf("resize volume %s: %w", volumeID, guestagent.ErrNotAttached)
	}
	if err := setLoopCapacity(filepath.Base(loop)); err != nil {
		return fmt.Errorf("resize volume %s: %w", volumeID, err)
	}
	if err := writeAttr(filepath.Join(ns, "revalidate_size"), "1"); err != nil {
		return fmt.Errorf("resize volume %s: %w", volumeID, err)
	}
	return nil
}

// List implements guestagent.Exposer.
func (t *nvmeTarget) List() ([]guestagent.Disk, error) {
	subs, err := filepath.Glob(filepath.Join(t.configDir, "subsystems", nqnPrefix+"*"))
	if err != nil {
		return nil, err
	}
	var out []guestagent.Disk
	for _, s := range subs {
		id := strings.TrimPrefix(filepath.Base(s), nqnPrefix)
		d := guestagent.Disk{VolumeID: id}
		if ctrl, err := t.controllerOf(id); err == nil && ctrl != "" {
			names, _ := filepath.Glob(filepath.Join(t.classDir, ctrl, ctrl+"n*"))
			if len(names) > 0 {
				d.Device = filepath.Join(devDir, filepath.Base(names[0]))
			}
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b guestagent.Disk) int { return strings.Compare(a.VolumeID, b.VolumeID) })
	return out, nil
}

// writeAttr writes a configfs or sysfs attribute unless it holds the value
// already (some cannot be written again once in use).
func writeAttr(path, value string) error {
	if readTrim(path) == value {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	_, err = f.Write([]byte(value))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}

// readTrim reads an attribute without its trailing blanks, "" when it
// cannot be read.
func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimRight(string(b), " \n\x00")
}

// removeIfExists removes a configfs directory or link that may be gone.
func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
