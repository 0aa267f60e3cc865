// Package wcow writes, on any OS, the pieces of a Windows container image
// that containerd on a Windows node imports: a base layer in the Windows
// layer format, the registry hives a base layer must carry, and an OCI image
// layout around one such layer (an image with no parent image).
//
// A Windows layer is a tar whose Files/ directory is the container's C:\.
// containerd's Windows differ hands it to hcsshim: a layer with no parent is
// written out entry by entry, each entry created in a directory that must
// already exist, and then processed by the Host Compute Service, which finds
// the registry hives in Files/Windows/System32/config and makes the layer's
// Hives directory from them (a base layer must not bring its own). Windows
// file attributes travel in the PAX record MSWINDOWS.fileattr (decimal);
// an entry without a security descriptor (MSWINDOWS.rawsd) inherits the
// layer directory's.
package wcow

import (
	"archive/tar"
	"bytes"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Layer tar conventions.
const (
	// FilesDir is the layer directory that is the container's C:\.
	FilesDir = "Files"
	// HivesDir is where the Host Compute Service keeps a layer's registry
	// hives; a base layer does not carry it.
	HivesDir = "Hives"
	// HiveDir is where a base layer carries its registry hives, below
	// FilesDir.
	HiveDir = "Windows/System32/config"
	// PAXFileAttributes is the PAX record holding a file's Win32 attributes
	// in decimal.
	PAXFileAttributes = "MSWINDOWS.fileattr"
	// Win32 file attributes.
	AttributeDirectory = 0x10
	AttributeArchive   = 0x20
)

// File is a regular file of a layer.
type File struct {
	// Path is where the file is in the container, relative to C:\, with
	// forward slashes: "diskplane.exe", "Program Files/x/y.dll".
	Path string
	Data []byte
}

// BaseLayer returns an uncompressed Windows base layer that holds files and
// the registry hives the HostProcess base image carries (each of HiveNames
// a MinimalHive in HiveDir), every entry dated mtime. Directories come
// before what they hold, and entries are sorted, so the same input gives
// the same bytes.
func BaseLayer(files []File, mtime time.Time) ([]byte, error) {
	mtime = mtime.UTC().Truncate(time.Second)
	content := map[string][]byte{}
	for _, name := range HiveNames {
		content[HiveDir+"/"+name] = MinimalHive(name, mtime)
	}
	for _, f := range files {
		if err := checkPath(f.Path); err != nil {
			return nil, err
		}
		if _, dup := content[f.Path]; dup {
			return nil, fmt.Errorf("%s: more than one file at this path", f.Path)
		}
		content[f.Path] = f.Data
	}
	dirs := map[string]bool{}
	for p := range content {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		if _, clash := content[d]; clash {
			return nil, fmt.Errorf("%s: a file where a directory is needed", d)
		}
	}
	names := make([]string, 0, len(content)+len(dirs))
	for p := range content {
		names = append(names, p)
	}
	for d := range dirs {
		names = append(names, d)
	}
	// A directory's name is a prefix of its entries', so sorting puts it
	// before them.
	slices.Sort(names)
	// NTFS compares names without regard to case.
	folded := map[string]string{}
	for _, p := range names {
		if other, clash := folded[strings.ToLower(p)]; clash {
			return nil, fmt.Errorf("%s and %s: one path on Windows", other, p)
		}
		folded[strings.ToLower(p)] = p
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(dirHeader(FilesDir, mtime)); err != nil {
		return nil, err
	}
	for _, p := range names {
		name := FilesDir + "/" + p
		if dirs[p] {
			if err := tw.WriteHeader(dirHeader(name, mtime)); err != nil {
				return nil, err
			}
			continue
		}
		data := content[p]
		h := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     name,
			Mode:     0o644,
			Size:     int64(len(data)),
			ModTime:  mtime, AccessTime: mtime, ChangeTime: mtime,
			PAXRecords: map[string]string{PAXFileAttributes: strconv.Itoa(AttributeArchive)},
			Format:     tar.FormatPAX,
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// dirHeader is the tar header of directory name.
func dirHeader(name string, mtime time.Time) *tar.Header {
	return &tar.Header{
		Typeflag: tar.TypeDir,
		Name:     name + "/",
		Mode:     0o755,
		ModTime:  mtime, AccessTime: mtime, ChangeTime: mtime,
		PAXRecords: map[string]string{PAXFileAttributes: strconv.Itoa(AttributeDirectory)},
		Format:     tar.FormatPAX,
	}
}

// checkPath refuses a path a layer cannot hold under FilesDir: empty,
// absolute, not clean, leaving C:\, naming an alternate data stream, with
// backslashes, or one of the hives BaseLayer writes itself.
func checkPath(p string) error {
	switch {
	case p == "" || p == ".":
		return fmt.Errorf("a file without a path")
	case strings.HasPrefix(p, "/"), path.Clean(p) != p, p == "..", strings.HasPrefix(p, "../"):
		return fmt.Errorf("%s: not a clean path relative to C:\\", p)
	case strings.ContainsAny(p, `\:`):
		return fmt.Errorf("%s: backslash or colon in a path", p)
	case strings.EqualFold(path.Dir(p), HiveDir):
		return fmt.Errorf("%s: the layer's hives are its own", p)
	}
	return nil
}
