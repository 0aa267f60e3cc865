//go:build linux

package mounter

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
)

// growSlack is how much smaller than its device a filesystem may be and
// still span it: mkfs rounds a device down to whole blocks (and mke2fs
// drops a last block group too small to be worth one), while EBS grows a
// volume by whole GiB.
const growSlack = 1 << 20

// filesystemBytes reads the size of the ext2/3/4 or xfs filesystem on
// device from its superblock: what resize2fs and xfs_growfs would compare
// with the device. known is false for any other filesystem. A superblock
// read while the filesystem is mounted may lag a growth the kernel made
// moments before, which only makes a grow that changes nothing.
func filesystemBytes(device string) (size int64, known bool, err error) {
	f, err := os.Open(device)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	sb := make([]byte, 4096)
	if _, err := f.ReadAt(sb, 0); err != nil {
		return 0, false, fmt.Errorf("read the superblock of %s: %w", device, err)
	}
	return superblockBytes(sb)
}

// superblockBytes reads a filesystem's size from the first 4 KiB of its
// device: an xfs superblock at 0 (big-endian), an ext2/3/4 one at 1024
// (little-endian).
func superblockBytes(sb []byte) (int64, bool, error) {
	if string(sb[0:4]) == "XFSB" {
		blockSize := int64(binary.BigEndian.Uint32(sb[4:8]))
		blocks := binary.BigEndian.Uint64(sb[8:16])
		if blockSize < 512 || blockSize > 65536 {
			return 0, false, fmt.Errorf("xfs superblock with a block size of %d bytes", blockSize)
		}
		return int64(blocks) * blockSize, true, nil
	}
	ext := sb[1024:2048]
	if binary.LittleEndian.Uint16(ext[56:58]) != 0xef53 {
		return 0, false, nil
	}
	logBlockSize := binary.LittleEndian.Uint32(ext[24:28])
	if logBlockSize > 6 {
		return 0, false, fmt.Errorf("ext superblock with a block size of 1 KiB << %d", logBlockSize)
	}
	blocks := uint64(binary.LittleEndian.Uint32(ext[4:8]))
	const incompat64Bit = 0x80
	if binary.LittleEndian.Uint32(ext[96:100])&incompat64Bit != 0 {
		blocks |= uint64(binary.LittleEndian.Uint32(ext[0x150:0x154])) << 32
	}
	return int64(blocks) * (1024 << logBlockSize), true, nil
}

// NeedResize compares the filesystem's size in its superblock with its
// device's size, without running a program for ext2/3/4 and xfs (a stage
// does it every time, and a new filesystem spans its device); other
// filesystems are mount-utils' to judge. A read-only device is never grown.
func (m *linuxMounter) NeedResize(device, mountPath string) (bool, error) {
	if readTrimmed(filepath.Join(m.devices.sysDir, "class", "block", filepath.Base(m.devices.kernelName(device)), "ro")) == "1" {
		return false, nil
	}
	fsBytes, known, err := filesystemBytes(device)
	if err != nil {
		return false, err
	}
	if !known {
		return m.resizer.NeedResize(device, mountPath)
	}
	deviceBytes, err := m.DeviceSize(device)
	if err != nil {
		return false, err
	}
	return deviceBytes-fsBytes >= growSlack, nil
}
