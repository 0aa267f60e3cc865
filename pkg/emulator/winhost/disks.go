package winhost

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// Partition styles, as Get-Disk reports them.
const (
	StyleRaw = "RAW"
	StyleGPT = "GPT"
	StyleMBR = "MBR"
)

// Partition types that matter to csi-proxy.
const (
	// TypeReserved is the Microsoft reserved partition (MSR) that
	// initializing a disk GPT creates; it never has a volume and csi-proxy
	// does not count it as a partition.
	TypeReserved = "reserved"
	// TypeBasic is a basic data partition, which gets a volume.
	TypeBasic = "basic"
	// TypeForeign is a partition of a type Windows does not mount (a Linux
	// filesystem, say): it gets no volume, but it is a partition.
	TypeForeign = "foreign"
)

const (
	mib = int64(1) << 20
	// msrOffset and msrSize are where Initialize-Disk puts the MSR on a GPT
	// disk: after the primary GPT, 16 MiB less what precedes it.
	msrOffset = int64(17408)
	msrSize   = 16*mib - msrOffset
	// endReserve is what stays free at the end of a disk: the backup GPT,
	// rounded to the 1 MiB alignment of partitions.
	endReserve = mib
	// minResize is csi-proxy v1.3.0's minimumResizeSize: a resize that would
	// add less is skipped without an error.
	minResize = 100 * mib
)

// Disk is what a volume holds as Windows sees it, kept by volume ID.
type Disk struct {
	VolumeID string `json:"volumeId"`
	// Size is the size Windows last scanned.
	Size       int64        `json:"size"`
	Online     bool         `json:"online"`
	Style      string       `json:"style"`
	Partitions []*Partition `json:"partitions,omitempty"`
	// Signature is what another system wrote over the whole disk, with no
	// partition table: ext4, xfs or crypto_LUKS (what a Linux node makes of
	// an EBS volume). Windows shows such a disk RAW, with no volume.
	Signature string `json:"signature,omitempty"`
}

// Partition is one partition of a disk.
type Partition struct {
	Number uint32 `json:"number"`
	Type   string `json:"type"`
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
	// Volume is the partition's volume; nil for partitions Windows does not
	// mount.
	Volume *Volume `json:"volume,omitempty"`
}

// Volume is a Windows volume: the filesystem on a partition.
type Volume struct {
	// ID is the volume's unique ID, \\?\Volume{GUID}\.
	ID string `json:"id"`
	// FileSystem is "NTFS", or "" for a volume Windows finds no filesystem
	// on (RAW).
	FileSystem string `json:"fileSystem,omitempty"`
	// Used is the space in use.
	Used int64 `json:"used,omitempty"`
	// Formats counts the formats this volume has had, so tests can tell a
	// filesystem made once from one made again.
	Formats int `json:"formats,omitempty"`
}

// serialNumber is the serial number Windows reports for the NVMe disk of an
// EBS volume: the volume ID without its dash, then the namespace.
func serialNumber(volumeID string) string {
	return strings.Replace(volumeID, "-", "", 1) + "_00000001."
}

// page83 is the disk's SCSI page 0x83 identifier, as hex: the one EBS
// reports is derived from the volume too.
func page83(volumeID string) string {
	return "414d5a4e" + hex.EncodeToString([]byte(strings.Replace(volumeID, "-", "", 1)))
}

func newVolumeID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf(`\\?\Volume{%x-%x-%x-%x-%x}\`, b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// ntfsMetadata is what a fresh NTFS volume of size bytes uses: the MFT
// zone and log file, modelled as 4 MiB plus 1/256 of the volume.
func ntfsMetadata(size int64) int64 { return 4*mib + size/256 }

// maxEnd is where the last partition of the disk may end.
func (d *Disk) maxEnd() int64 { return (d.Size - endReserve) / mib * mib }

// makeBoot lays the disk out as a Windows installation: GPT, MSR and one
// NTFS volume over the rest (mounted at C:\ by refresh).
func (d *Disk) makeBoot() {
	d.initializeGPT()
	d.addBasic()
	v := d.Partitions[len(d.Partitions)-1].Volume
	v.FileSystem, v.Formats = "NTFS", 1
	v.Used = ntfsMetadata(d.Size) + 6<<30
}

func (d *Disk) initializeGPT() {
	d.Style = StyleGPT
	d.Partitions = []*Partition{{Number: 1, Type: TypeReserved, Offset: msrOffset, Size: msrSize}}
}

// addBasic creates a basic data partition over the free space after the
// last partition, with a RAW volume on it.
func (d *Disk) addBasic() *Partition {
	start := 16 * mib
	for _, p := range d.Partitions {
		if end := (p.Offset + p.Size + mib - 1) / mib * mib; end > start {
			start = end
		}
	}
	p := &Partition{Number: uint32(len(d.Partitions) + 1), Type: TypeBasic, Offset: start, Size: d.maxEnd() - start,
		Volume: &Volume{ID: newVolumeID()}}
	d.Partitions = append(d.Partitions, p)
	return p
}

// normalPartitions are the partitions csi-proxy counts: all but the MSR.
func (d *Disk) normalPartitions() int {
	n := 0
	for _, p := range d.Partitions {
		if p.Type != TypeReserved {
			n++
		}
	}
	return n
}

// ListDiskIDs returns the serial number and page 0x83 ID of every attached
// disk by disk number. Like csi-proxy (every release, and the v2 library),
// it opens each disk to read its page 0x83 ID and fails as a whole when one
// cannot be opened.
func (h *Host) ListDiskIDs() (map[uint32]DiskIDs, error) {
	out := map[uint32]DiskIDs{}
	err := h.do("ListDiskIDs", func() (bool, error) {
		for id, n := range h.st.Numbers {
			if h.unopenable[id] {
				clear(out)
				return false, fmt.Errorf("open %s%d: %w", physicalDrive, n, ErrDiskUnopenable)
			}
			out[n] = DiskIDs{SerialNumber: serialNumber(id), Page83: page83(id)}
		}
		return false, nil
	})
	return out, err
}

// physicalDrive is the prefix of a disk's Win32 device path.
const physicalDrive = `\\.\PhysicalDrive`

// SetUnopenable makes the disk of a volume one that Windows lists but
// cannot open (a disk arriving or leaving, or one whose driver failed), or
// an ordinary one again: while it is attached, listing the disks fails as a
// whole, and reading it fails.
func (h *Host) SetUnopenable(volumeID string, unopenable bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unopenable == nil {
		h.unopenable = map[string]bool{}
	}
	if unopenable {
		h.unopenable[volumeID] = true
	} else {
		delete(h.unopenable, volumeID)
	}
	klog.V(2).InfoS("Disk openability set", "volumeID", volumeID, "unopenable", unopenable)
}

// DiskIDs identify a disk.
type DiskIDs struct {
	Page83       string
	SerialNumber string
}

// DiskLocation is where a disk sits on its adapter.
type DiskLocation struct {
	Adapter, Bus, Target, LUNID string
}

// ListDiskLocations returns where each disk is: every EBS NVMe disk is a
// namespace of its own controller, so the target is the disk number.
func (h *Host) ListDiskLocations() (map[uint32]DiskLocation, error) {
	out := map[uint32]DiskLocation{}
	err := h.do("ListDiskLocations", func() (bool, error) {
		for _, n := range h.st.Numbers {
			out[n] = DiskLocation{Adapter: "0", Bus: "0", Target: strconv.Itoa(int(n)), LUNID: "1"}
		}
		return false, nil
	})
	return out, err
}

// IsDiskInitialized reports whether the disk has a partition style.
func (h *Host) IsDiskInitialized(number uint32) (bool, error) {
	var ok bool
	err := h.do("IsDiskInitialized", func() (bool, error) {
		d, err := h.disk(number)
		if err == nil {
			ok = d.Style != StyleRaw
		}
		return false, err
	})
	return ok, err
}

// InitializeDisk gives a raw, online disk the GPT style and its MSR.
func (h *Host) InitializeDisk(number uint32) error {
	return h.do("InitializeDisk", func() (bool, error) {
		d, err := h.onlineDisk(number, "initialize")
		if err != nil {
			return false, err
		}
		if d.Style != StyleRaw {
			return false, fmt.Errorf("initialize disk %d: the disk has already been initialized (%s)", number, d.Style)
		}
		if d.Signature != "" {
			klog.InfoS("Initializing a disk overwrites what another system wrote to it", "disk", number, "signature", d.Signature)
			d.Signature = ""
		}
		d.initializeGPT()
		klog.V(2).InfoS("Initialized disk", "disk", number, "style", d.Style)
		return true, nil
	})
}

// BasicPartitionsExist reports whether the disk has a partition other than
// the MSR.
func (h *Host) BasicPartitionsExist(number uint32) (bool, error) {
	var exist bool
	err := h.do("BasicPartitionsExist", func() (bool, error) {
		d, err := h.disk(number)
		if err == nil {
			exist = d.normalPartitions() > 0
		}
		return false, err
	})
	return exist, err
}

// CreateBasicPartition creates a basic data partition over the free space
// of an initialized, online disk.
func (h *Host) CreateBasicPartition(number uint32) error {
	return h.do("CreateBasicPartition", func() (bool, error) {
		d, err := h.onlineDisk(number, "create a partition on")
		if err != nil {
			return false, err
		}
		if d.Style == StyleRaw {
			return false, fmt.Errorf("create a partition on disk %d: the disk is not initialized", number)
		}
		p := d.addBasic()
		if p.Size <= 0 {
			d.Partitions = d.Partitions[:len(d.Partitions)-1]
			return false, fmt.Errorf("create a partition on disk %d: not enough available capacity", number)
		}
		h.hideNew(p.Volume.ID)
		klog.V(2).InfoS("Created basic data partition", "disk", number, "partition", p.Number, "bytes", p.Size, "volume", p.Volume.ID)
		return true, nil
	})
}

func (h *Host) onlineDisk(number uint32, doing string) (*Disk, error) {
	d, err := h.disk(number)
	if err != nil {
		return nil, err
	}
	if !d.Online {
		return nil, fmt.Errorf("%s disk %d: the disk is offline", doing, number)
	}
	return d, nil
}

// Rescan updates the host's storage cache: every disk shows its size now.
func (h *Host) Rescan() error {
	ctx, cancel := contextWithSourceTimeout()
	defer cancel()
	return h.do("Rescan", func() (bool, error) {
		attached, err := h.cfg.Source.Attached(ctx)
		if err != nil {
			return false, err
		}
		changed := false
		for _, a := range attached {
			if d, ok := h.st.Disks[a.VolumeID]; ok && d.Size != a.SizeBytes {
				klog.V(2).InfoS("Disk size changed", "volumeID", a.VolumeID, "from", d.Size, "to", a.SizeBytes)
				d.Size, changed = a.SizeBytes, true
			}
		}
		return changed, nil
	})
}

// GetDiskStats returns the disk's size as last scanned.
func (h *Host) GetDiskStats(number uint32) (int64, error) {
	var size int64
	err := h.do("GetDiskStats", func() (bool, error) {
		d, err := h.disk(number)
		if err == nil {
			size = d.Size
		}
		return false, err
	})
	return size, err
}

// SetDiskState brings a disk online or takes it offline; the boot disk
// cannot be taken offline.
func (h *Host) SetDiskState(number uint32, online bool) error {
	return h.do("SetDiskState", func() (bool, error) {
		d, err := h.disk(number)
		if err != nil || d.Online == online {
			return false, err
		}
		if !online && number == 0 {
			return false, fmt.Errorf("set disk %d offline: the system disk cannot be taken offline", number)
		}
		d.Online = online
		klog.V(2).InfoS("Disk state changed", "disk", number, "online", online)
		return true, nil
	})
}

// GetDiskState reports whether a disk is online.
func (h *Host) GetDiskState(number uint32) (bool, error) {
	var online bool
	err := h.do("GetDiskState", func() (bool, error) {
		d, err := h.disk(number)
		if err == nil {
			online = d.Online
		}
		return false, err
	})
	return online, err
}
