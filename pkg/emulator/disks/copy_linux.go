package disks

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// copyMethod says how an image was copied, for the log.
type copyMethod string

const (
	// copyReflink shares the source's extents (FICLONE): instant, and no
	// space is used until either copy is written.
	copyReflink copyMethod = "reflink"
	// copySparse copies only the source's data extents, so holes stay holes.
	copySparse copyMethod = "sparse copy"
)

// copyBufferSize is the chunk size of the read/write fallback.
const copyBufferSize = 1 << 20

// copyImage makes dst, an empty file, a copy of src with the same size and
// holes: a reflink when the filesystem supports it, else a sparse copy.
func copyImage(dst, src *os.File) (copyMethod, error) {
	err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
	if err == nil {
		return copyReflink, nil
	}
	if !reflinkUnsupported(err) {
		return "", fmt.Errorf("reflink %s to %s: %w", src.Name(), dst.Name(), err)
	}
	if err := sparseCopy(dst, src); err != nil {
		return "", err
	}
	return copySparse, nil
}

// reflinkUnsupported reports whether FICLONE failed only because the
// filesystem (or the pair of files) cannot share extents.
func reflinkUnsupported(err error) bool {
	for _, e := range []error{unix.EOPNOTSUPP, unix.ENOTTY, unix.EXDEV, unix.EINVAL, unix.ENOSYS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// sparseCopy copies src into the empty file dst extent by extent: it finds
// each data range with SEEK_DATA/SEEK_HOLE and copies only those, then sizes
// dst like src, so every hole of src is a hole of dst.
func sparseCopy(dst, src *os.File) error {
	st, err := src.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", src.Name(), err)
	}
	size := st.Size()
	if err := dst.Truncate(size); err != nil {
		return fmt.Errorf("size %s: %w", dst.Name(), err)
	}
	srcFd := int(src.Fd())
	for off := int64(0); off < size; {
		start, err := unix.Seek(srcFd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data after off: the rest is a hole
		}
		if err != nil {
			return fmt.Errorf("find data in %s: %w", src.Name(), err)
		}
		end, err := unix.Seek(srcFd, start, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("find hole in %s: %w", src.Name(), err)
		}
		if err := copyRange(dst, src, start, end-start); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// copyRange copies n bytes at offset off from src to the same offset in dst,
// in the kernel (copy_file_range) when it can, else through a buffer.
func copyRange(dst, src *os.File, off, n int64) error {
	roff, woff := off, off
	for n > 0 {
		chunk := int(min(n, 1<<30))
		c, err := unix.CopyFileRange(int(src.Fd()), &roff, int(dst.Fd()), &woff, chunk, 0)
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
				return copyRangeBuffered(dst, src, roff, n)
			}
			return fmt.Errorf("copy %s to %s: %w", src.Name(), dst.Name(), err)
		}
		if c == 0 {
			return fmt.Errorf("copy %s to %s: source ended early at %d", src.Name(), dst.Name(), roff)
		}
		n -= int64(c)
	}
	return nil
}

// copyRangeBuffered is copyRange through user space, for filesystems without
// copy_file_range.
func copyRangeBuffered(dst, src *os.File, off, n int64) error {
	r := io.NewSectionReader(src, off, n)
	w := io.NewOffsetWriter(dst, off)
	if _, err := io.CopyBuffer(w, r, make([]byte, copyBufferSize)); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src.Name(), dst.Name(), err)
	}
	return nil
}
