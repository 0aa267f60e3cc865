//go:build linux

package mounter

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	utilexec "k8s.io/utils/exec"
)

// probeWindow is how much of each end of a device the blank test reads.
// Every signature blkid knows, and the headers of GPT, MBR, LUKS, LVM and
// every filesystem Diskplane formats, lie in the first MiB; GPT's backup
// header and some RAID superblocks lie in the last one.
const probeWindow = 1 << 20

// blkid's exit status when its low-level probe found nothing. blkid also
// exits with it when it could not open or read the device, which is why
// that status alone never makes a device blank.
const blkidNothingFound = 2

// deviceContent is what a probe found on a device.
type deviceContent struct {
	// Filesystem is the signature blkid found (ext4, xfs, crypto_LUKS, swap
	// …), or "".
	Filesystem string
	// PartitionTable is the type of partition table blkid found (gpt, dos),
	// or "".
	PartitionTable string
	// Unrecognised says blkid found no signature but the device's first or
	// last MiB is not all zeros: data of a kind blkid does not know (a
	// database's raw block volume, say), which must not be formatted over.
	Unrecognised bool
	// Label is the label blkid read from the signature (a filesystem's, or
	// a LUKS2 header's), or "".
	Label string
	// Version is the signature's version as blkid reports it ("2" for a
	// LUKS2 header), or "".
	Version string
}

// Blank reports whether the device was positively read as holding nothing.
func (c deviceContent) Blank() bool { return c == deviceContent{} }

// String says what the device holds, for messages.
func (c deviceContent) String() string {
	switch {
	case c.PartitionTable != "":
		return "a " + c.PartitionTable + " partition table"
	case c.Filesystem != "":
		return c.Filesystem
	case c.Unrecognised:
		return "data no probe recognises (its first or last MiB is not zeros)"
	default:
		return "nothing"
	}
}

// probe finds out what device holds, and proves a blank device blank. A
// device is blank only when both of these hold:
//   - blkid's low-level probe (-p, no cache) exited with "nothing found" and
//     wrote nothing to stderr: blkid exits with the same status when it
//     cannot open the device (ENXIO, ENODEV, or EIO while an NVMe controller
//     resets), and says why on stderr;
//   - an independent read of the device's first and last MiB succeeded and
//     found only zeros. A new EBS volume reads as zeros, so this refuses
//     nothing Diskplane should format, while it catches what a probe cannot
//     see: a device that is gone (the read fails) and data without a known
//     signature.
//
// Anything in doubt is an error, never "blank".
func probe(ex utilexec.Interface, device string) (deviceContent, error) {
	var stdout, stderr bytes.Buffer
	cmd := ex.Command("blkid", "-p", "-o", "export", device)
	cmd.SetStdout(&stdout)
	cmd.SetStderr(&stderr)
	err := cmd.Run()
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return parseBlkid(stdout.Bytes()), nil
	case errors.As(err, &exit) && exit.ExitStatus() == blkidNothingFound && strings.TrimSpace(stderr.String()) == "":
		// Nothing found, and nothing went wrong that blkid admits; now read
		// the device ourselves.
	default:
		return deviceContent{}, fmt.Errorf("probe %s with blkid: %w: %s", device, err, strings.TrimSpace(stderr.String()))
	}
	zeros, err := endsAreZero(device)
	if err != nil {
		return deviceContent{}, fmt.Errorf("read %s to prove it blank: %w", device, err)
	}
	return deviceContent{Unrecognised: !zeros}, nil
}

// parseBlkid reads `blkid -p -o export`: TYPE names a filesystem (or other
// signature), PTTYPE a partition table.
func parseBlkid(out []byte) deviceContent {
	var c deviceContent
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		key, value, ok := strings.Cut(s.Text(), "=")
		if !ok {
			continue
		}
		switch key {
		case "TYPE":
			c.Filesystem = value
		case "PTTYPE":
			c.PartitionTable = value
		case "LABEL":
			c.Label = value
		case "VERSION":
			c.Version = value
		}
	}
	if c.Filesystem == "" && c.PartitionTable == "" {
		// blkid said it found something, yet named nothing (a signature it
		// reports only by usage, say): not blank.
		return deviceContent{Unrecognised: true}
	}
	return c
}

// endsAreZero reads the first and the last probeWindow bytes of a device
// (all of it, when it is smaller than two windows) and reports whether they
// are all zeros. A read that fails or comes up short is an error.
func endsAreZero(device string) (bool, error) {
	f, size, err := openMeasured(device)
	if err != nil {
		return false, err
	}
	defer f.Close()
	offsets := []int64{0}
	if size > probeWindow {
		offsets = append(offsets, max(probeWindow, size-probeWindow))
	}
	return readsZero(f, size, offsets)
}

// windowIsZero reports whether the probeWindow bytes of a device at off
// (fewer, where the device ends) are all zeros; a device that ends before
// off has nothing there, which is zeros.
func windowIsZero(device string, off int64) (bool, error) {
	f, size, err := openMeasured(device)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if off >= size {
		return true, nil
	}
	return readsZero(f, size, []int64{off})
}

// openMeasured opens a device for reading and measures it; a device with
// no capacity is an error.
func openMeasured(device string) (*os.File, int64, error) {
	f, err := os.Open(device)
	if err != nil {
		return nil, 0, err
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("measure: %w", err)
	}
	if size == 0 {
		f.Close()
		return nil, 0, errors.New("the device has no capacity")
	}
	return f, size, nil
}

// readsZero reads probeWindow bytes (fewer at the end) at each offset and
// reports whether all of them are zeros.
func readsZero(f *os.File, size int64, offsets []int64) (bool, error) {
	buf := make([]byte, min(size, probeWindow))
	for _, off := range offsets {
		n := min(size-off, probeWindow)
		if _, err := f.ReadAt(buf[:n], off); err != nil {
			return false, fmt.Errorf("read %d bytes at %d: %w", n, off, err)
		}
		if !allZero(buf[:n]) {
			return false, nil
		}
	}
	return true, nil
}
