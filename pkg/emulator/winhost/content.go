package winhost

import "fmt"

// signatureBytes are the bytes by which each kind of content is known and
// where they lie: what blkid and Windows look for.
var signatureBytes = map[string]struct {
	offset int64
	magic  []byte
}{
	"ext4":        {1080, []byte{0x53, 0xef}}, // the superblock's s_magic
	"xfs":         {0, []byte("XFSB")},
	"crypto_LUKS": {0, []byte("LUKS\xba\xbe")},
	"mbr":         {510, []byte{0x55, 0xaa}},
	"gpt":         {512, []byte("EFI PART")},
	"ntfs":        {3, []byte("NTFS    ")},
}

// ReadDisk reads the bytes of an attached disk at offset, as a node plugin
// with the host's devices (a HostProcess container) reads
// \\.\PhysicalDriveN. The host keeps no file contents, so the bytes are
// zeros but for the marks by which what is on the disk is known: a
// partition table's (an MBR's signature, and a GPT's header), an NTFS boot
// sector at the start of each formatted volume, a superblock where a
// foreign partition begins, and the superblock or header of what another
// system wrote over the whole disk (Disk.Signature).
func (h *Host) ReadDisk(number uint32, offset int64, b []byte) error {
	return h.do("ReadDisk", func() (bool, error) {
		d, err := h.disk(number)
		if err != nil {
			return false, err
		}
		if h.unopenable[d.VolumeID] {
			return false, fmt.Errorf("open %s%d: %w", physicalDrive, number, ErrDiskUnopenable)
		}
		if offset < 0 || offset+int64(len(b)) > d.Size {
			return false, fmt.Errorf("read %d bytes at %d of disk %d: beyond its %d bytes", len(b), offset, number, d.Size)
		}
		clear(b)
		mark := func(kind string, at int64) {
			sig := signatureBytes[kind]
			for i, c := range sig.magic {
				if p := at + sig.offset + int64(i) - offset; p >= 0 && p < int64(len(b)) {
					b[p] = c
				}
			}
		}
		switch d.Style {
		case StyleGPT:
			mark("mbr", 0) // the protective MBR
			mark("gpt", 0)
		case StyleMBR:
			mark("mbr", 0)
		}
		if d.Signature != "" {
			mark(d.Signature, 0)
		}
		for _, p := range d.Partitions {
			switch {
			case p.Type == TypeForeign:
				mark("ext4", p.Offset)
			case p.Volume != nil && p.Volume.FileSystem != "":
				mark("ntfs", p.Offset)
			}
		}
		return false, nil
	})
}
