// Package winhost is the Windows host that csi-proxy manages, as the
// emulator keeps it: the disks attached to the instance the host plays
// (serial number = the EBS volume ID without its dash, as on a Nitro
// instance), their partition style, partitions and volumes, NTFS formats,
// volume mount points, symlinks, and online state. It answers the
// operations csi-proxy's host APIs (v1 server and v2 library alike) are made
// of, with the behaviour and the refusals of Windows and csi-proxy v1.3.0
// (Config.MountByAccessPath: of the releases before it):
// a new disk arrives offline and raw; a disk is initialized GPT with a
// Microsoft reserved partition; a basic data partition gets a volume and
// another partition type none; a volume mounts only on an empty directory;
// a resize smaller than 100 MiB is skipped; a size change shows only after
// a rescan.
//
// Which disks are attached comes from a Source (the EC2 emulator's admin
// API in the csi-proxy emulator, a list in tests); what is on them is kept
// by volume ID, so a volume detached and attached again (or moved to
// another instance of the same host) shows its partitions and filesystem
// again, and saved to the data directory after every change. The model
// keeps no file contents: a volume's files are not emulated, only its
// format, size and use.
//
// Directories are real (under Root, which stands for the drive; on Windows
// and under Wine the drive itself). Mount points and symlinks are recorded
// reparse points over real directories, because Wine cannot make either:
// the directory exists where Windows would show one, and this model knows
// what it points to.
package winhost

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Source reports the volumes attached to the instance this host plays.
type Source interface {
	// Attached returns the attached volumes now. The boot volume, if listed,
	// is disk 0 and holds the Windows installation at C:\.
	Attached(ctx context.Context) ([]Attached, error)
}

// Attached is one volume attached to the host.
type Attached struct {
	// VolumeID is the EBS volume ID, vol-….
	VolumeID string
	// SizeBytes is the volume's size now; the host sees a change only after
	// a rescan.
	SizeBytes int64
	// Boot marks the instance's root volume.
	Boot bool
}

// Config shapes a host.
type Config struct {
	// Source tells which volumes are attached.
	Source Source
	// DataDir keeps the state (state.json); empty keeps it in memory only.
	DataDir string
	// Root is the directory that stands for a drive (C:\ and any other
	// letter): C:\var\lib is Root/var/lib. Empty means the real drives, on
	// Windows or under Wine.
	Root string
	// MountByAccessPath makes MountVolume refuse a path that is a mount
	// point of the same volume already, as csi-proxy up to v1.2 does: it
	// runs Add-PartitionAccessPath, which will not add an access path the
	// partition has. csi-proxy v1.3.0 and the v2 library call
	// SetVolumeMountPoint and treat that as done.
	MountByAccessPath bool
}

// sourceTimeout bounds one question to the Source.
const sourceTimeout = 10 * time.Second

func contextWithSourceTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), sourceTimeout)
}

// Host is one emulated Windows host. It is safe for concurrent use; every
// operation sees the attachments of the moment it starts.
type Host struct {
	cfg Config

	mu     sync.Mutex
	st     *state
	faults faults
	// unopenable are the volumes whose disks Windows lists but cannot
	// open (SetUnopenable).
	unopenable map[string]bool
}

// New loads the host's saved state, if any, and returns it.
func New(cfg Config) (*Host, error) {
	if cfg.Source == nil {
		return nil, errors.New("winhost: a Source of attached volumes is required")
	}
	st, err := load(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	return &Host{cfg: cfg, st: st}, nil
}

// do runs op, the host operation called name, on the current attachments
// and saves the state when op changed it (op reports that). A fault armed
// for name (FailNext) fails it once, before or after op.
func (h *Host) do(name string, op func() (changed bool, err error)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.refresh(); err != nil {
		return err
	}
	f, armed := h.takeFault(name)
	if armed && !f.After {
		return fmt.Errorf("%s: %w", name, ErrInjected)
	}
	changed, err := op()
	if changed {
		if serr := save(h.cfg.DataDir, h.st); serr != nil {
			return errors.Join(err, serr)
		}
	}
	if armed && err == nil {
		return fmt.Errorf("%s (done, then answered with an error as a call that timed out): %w", name, ErrInjected)
	}
	return err
}

// refresh brings the attached disks up to date: a volume that arrived gets
// a disk number (the boot volume 0, others the lowest free) and, when it is
// new to this host, a raw disk of its size; a volume that left loses its
// number. Arrivals come offline, as Windows Server's SAN policy brings up
// disks that are not the boot disk. Sizes change only on Rescan.
func (h *Host) refresh() error {
	ctx, cancel := contextWithSourceTimeout()
	defer cancel()
	attached, err := h.cfg.Source.Attached(ctx)
	if err != nil {
		return fmt.Errorf("list the disks attached to this host: %w", err)
	}
	present := map[string]Attached{}
	for _, a := range attached {
		present[a.VolumeID] = a
	}
	changed := false
	for id := range h.st.Numbers {
		if _, ok := present[id]; !ok {
			klog.V(2).InfoS("Disk removed", "disk", h.st.Numbers[id], "volumeID", id)
			delete(h.st.Numbers, id)
			changed = true
		}
	}
	ids := make([]string, 0, len(attached))
	for _, a := range attached {
		ids = append(ids, a.VolumeID)
	}
	sort.Strings(ids) // arrivals in one refresh get numbers in a stable order
	for _, id := range ids {
		a := present[id]
		if _, ok := h.st.Numbers[id]; ok {
			continue
		}
		d, known := h.st.Disks[id]
		if !known {
			d = &Disk{VolumeID: id, Size: a.SizeBytes, Style: StyleRaw}
			if a.Boot {
				d.makeBoot()
			}
			h.st.Disks[id] = d
		}
		d.Online = a.Boot
		h.st.Numbers[id] = h.freeNumber(a.Boot)
		klog.V(2).InfoS("Disk arrived", "disk", h.st.Numbers[id], "volumeID", id, "bytes", d.Size, "style", d.Style)
		if a.Boot {
			h.st.Mounts[canonical(`C:\`)] = d.Partitions[len(d.Partitions)-1].Volume.ID
		}
		changed = true
	}
	if changed {
		return save(h.cfg.DataDir, h.st)
	}
	return nil
}

// freeNumber is the disk number an arriving disk gets: 0 for the boot
// disk, else the lowest number no attached disk has.
func (h *Host) freeNumber(boot bool) uint32 {
	if boot {
		return 0
	}
	used := map[uint32]bool{}
	for _, n := range h.st.Numbers {
		used[n] = true
	}
	n := uint32(1)
	for used[n] {
		n++
	}
	return n
}

// disk returns the attached disk with that number.
func (h *Host) disk(number uint32) (*Disk, error) {
	for id, n := range h.st.Numbers {
		if n == number {
			return h.st.Disks[id], nil
		}
	}
	return nil, fmt.Errorf("disk %d: %w", number, ErrNoSuchDisk)
}

// volume returns a volume present on the host (on an attached, online
// disk) with its partition and disk.
func (h *Host) volume(volumeID string) (*Volume, *Partition, *Disk, error) {
	for id := range h.st.Numbers {
		d := h.st.Disks[id]
		if !d.Online {
			continue
		}
		for _, p := range d.Partitions {
			if p.Volume != nil && p.Volume.ID == volumeID {
				return p.Volume, p, d, nil
			}
		}
	}
	return nil, nil, nil, fmt.Errorf("volume %s: %w", volumeID, ErrNoSuchVolume)
}

// Errors of the host, wrapped with what was asked for.
var (
	// ErrNoSuchDisk: no attached disk has that number.
	ErrNoSuchDisk = errors.New("no such disk")
	// ErrNoSuchVolume: no volume with that ID is present (its disk may be
	// offline or detached).
	ErrNoSuchVolume = errors.New("no such volume")
	// ErrNotMountPoint: the path is not a volume mount point.
	ErrNotMountPoint = errors.New("not a mounted folder")
	// ErrAccessPathInUse: Add-PartitionAccessPath was asked for an access
	// path the partition has already (MountByAccessPath).
	ErrAccessPathInUse = errors.New("the access path is already in use")
	// ErrDiskUnopenable: Windows lists the disk but cannot open it
	// (SetUnopenable).
	ErrDiskUnopenable = errors.New("the device is not ready")
)
