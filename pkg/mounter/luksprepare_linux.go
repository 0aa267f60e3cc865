//go:build linux

package mounter

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// prepareMapping makes a new LUKS mapping read as blank where the blank
// test reads (its first and last probeWindow bytes): through the mapping, a
// device's zeros decrypt to random bytes, which no blank test accepts.
//
// It writes zeros only over the units (the mapping's logical blocks) that
// positively read as never written: those whose ciphertext on the device is
// still all zeros. dm-crypt turns every block written through the mapping
// into ciphertext that is all zeros with a chance of 2^-4096, and Diskplane
// formats LUKS2 only over a device whose bytes are zeros there (luksFormat
// reads them first), so a unit that is zeros on the device was never
// written. A unit that was — by an earlier preparation, by mkfs, by a pod —
// is never touched, whatever the header's label says: so preparation can
// be done again, whole or in part, at any time, and never loses a byte.
//
// The mapping is opened exclusively, so nothing can mount it while its
// units are read and written; when it is busy (mounted: a filesystem was
// made on it), the units are only read, and one that would need zeros is
// an error rather than a write under a filesystem's feet.
func prepareMapping(device, mapping string, dataOffset int64) error {
	mapped, err := os.OpenFile(mapping, os.O_RDWR|unix.O_DIRECT|unix.O_EXCL, 0)
	busy := errors.Is(err, unix.EBUSY)
	if busy {
		mapped, err = os.OpenFile(mapping, os.O_RDONLY|unix.O_DIRECT, 0)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", mapping, err)
	}
	defer mapped.Close()
	// The device is read past its page cache: dm-crypt writes to it
	// directly, so cached pages of it may be stale.
	raw, err := os.OpenFile(device, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", device, err)
	}
	defer raw.Close()
	unit, err := unix.IoctlGetInt(int(mapped.Fd()), unix.BLKSSZGET)
	if err != nil {
		return fmt.Errorf("read the block size of %s: %w", mapping, err)
	}
	size, err := mapped.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("measure %s: %w", mapping, err)
	}
	blank, written, err := classifyUnits(mapped, raw, size, dataOffset, int64(unit))
	if err != nil {
		return err
	}
	switch {
	case written:
		klog.V(2).InfoS("The mapping was written after its header was formatted; leaving every byte of it as it is",
			"mapping", mapping, "neverWrittenUnits", len(blank))
		return nil
	case len(blank) == 0:
		return nil
	case busy:
		return fmt.Errorf("%s is in use, and %d of its blocks were never written; try again once nothing uses it", mapping, len(blank))
	}
	zeros, free, err := alignedBuffer(unit)
	if err != nil {
		return err
	}
	defer free()
	for _, off := range blank {
		if _, err := mapped.WriteAt(zeros, off); err != nil {
			return fmt.Errorf("write zeros at %d of %s: %w", off, mapping, err)
		}
	}
	if err := mapped.Sync(); err != nil {
		return fmt.Errorf("flush %s: %w", mapping, err)
	}
	klog.V(4).InfoS("Wrote zeros over the never-written blocks of the mapping's probe windows", "mapping", mapping, "blocks", len(blank), "blockBytes", unit)
	return nil
}

// classifyUnits reads the probe windows of a mapping of size bytes and the
// ciphertext under them (dataOffset further on raw), unit bytes at a time.
// It returns the offsets of the units never written (ciphertext all zeros)
// and whether any unit holds something written other than zeros.
func classifyUnits(mapped, raw *os.File, size, dataOffset, unit int64) (blank []int64, written bool, err error) {
	if unit <= 0 || probeWindow%unit != 0 {
		return nil, false, fmt.Errorf("a block size of %d bytes does not divide the probe window", unit)
	}
	plain, freePlain, err := alignedBuffer(probeWindow)
	if err != nil {
		return nil, false, err
	}
	defer freePlain()
	cipher, freeCipher, err := alignedBuffer(probeWindow)
	if err != nil {
		return nil, false, err
	}
	defer freeCipher()
	offsets := []int64{0}
	if size > probeWindow {
		offsets = append(offsets, max(probeWindow, size-probeWindow))
	}
	for _, off := range offsets {
		n := min(size-off, probeWindow) / unit * unit
		if _, err := mapped.ReadAt(plain[:n], off); err != nil {
			return nil, false, fmt.Errorf("read the mapping at %d: %w", off, err)
		}
		if _, err := raw.ReadAt(cipher[:n], dataOffset+off); err != nil {
			return nil, false, fmt.Errorf("read the device at %d: %w", dataOffset+off, err)
		}
		for u := int64(0); u < n; u += unit {
			switch {
			case allZero(cipher[u : u+unit]):
				blank = append(blank, off+u)
			case !allZero(plain[u : u+unit]):
				written = true
			}
		}
	}
	return blank, written, nil
}

// alignedBuffer returns n bytes aligned to the page, as O_DIRECT needs, and
// the function that releases them.
func alignedBuffer(n int) ([]byte, func(), error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("allocate an aligned buffer: %w", err)
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}
