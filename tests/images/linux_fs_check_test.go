package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// The checks of the Linux image index `make image` writes
// (_output/images/diskplane-index.oci.tar): its layout, and the root
// filesystem of each image as containerd unpacks it, read without running
// anything, so that the arm64 image is checked on an amd64 machine.

// Media types of the OCI image specification.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
)

// ociPlatform is a platform of an index entry.
type ociPlatform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant"`
}

// indexEntry is a manifest an image index lists.
type indexEntry struct {
	MediaType string       `json:"mediaType"`
	Digest    string       `json:"digest"`
	Size      int64        `json:"size"`
	Platform  *ociPlatform `json:"platform"`
}

// ociIndexArchive is an OCI image layout, read from a tar archive, whose
// index.json names one image index.
type ociIndexArchive struct {
	files    map[string][]byte
	refName  string
	digest   string // of the image index
	manifest []indexEntry
}

// readOCIIndexArchive reads an OCI image layout holding one image index
// and checks every blob is stored under its own digest.
func readOCIIndexArchive(archive []byte) (*ociIndexArchive, error) {
	files, err := readLayoutFiles(archive)
	if err != nil {
		return nil, err
	}
	a := &ociIndexArchive{files: files}
	for name, data := range a.files {
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && sha256Digest(data) != "sha256:"+hexDigest {
			return nil, fmt.Errorf("%s holds %s", name, sha256Digest(data))
		}
	}
	var top struct {
		Manifests []struct {
			indexEntry
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(a.files["index.json"], &top); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != mediaTypeIndex {
		return nil, fmt.Errorf("index.json lists %d entries, want one image index", len(top.Manifests))
	}
	a.refName = top.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	a.digest = top.Manifests[0].Digest
	data, err := a.blob(top.Manifests[0].indexEntry, mediaTypeIndex)
	if err != nil {
		return nil, err
	}
	var index struct {
		Manifests []indexEntry `json:"manifests"`
	}
	if err := json.Unmarshal(data, &index); err != nil {
		return nil, fmt.Errorf("the image index: %w", err)
	}
	a.manifest = index.Manifests
	return a, nil
}

// blob returns the blob a descriptor names, checked against its size and
// media type.
func (a *ociIndexArchive) blob(d indexEntry, mediaType string) ([]byte, error) {
	if d.MediaType != mediaType {
		return nil, fmt.Errorf("%s: media type %q, want %q", d.Digest, d.MediaType, mediaType)
	}
	data, ok := a.files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok || int64(len(data)) != d.Size {
		return nil, fmt.Errorf("%s: no blob of %d bytes", d.Digest, d.Size)
	}
	return data, nil
}

// image reads the image of an index entry: its configuration and its
// layers, uncompressed, each checked against the configuration's diff ID.
func (a *ociIndexArchive) image(d indexEntry) (*ociConfig, [][]byte, error) {
	data, err := a.blob(d, mediaTypeManifest)
	if err != nil {
		return nil, nil, err
	}
	var mf struct {
		Config indexEntry   `json:"config"`
		Layers []indexEntry `json:"layers"`
	}
	if err := json.Unmarshal(data, &mf); err != nil {
		return nil, nil, fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	if data, err = a.blob(mf.Config, mediaTypeConfig); err != nil {
		return nil, nil, err
	}
	cfg := &ociConfig{}
	if err := json.Unmarshal(data, cfg); err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", mf.Config.Digest, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(mf.Layers) {
		return nil, nil, fmt.Errorf("config %s: %d diff IDs for %d layers", mf.Config.Digest, len(cfg.RootFS.DiffIDs), len(mf.Layers))
	}
	var layers [][]byte
	for i, l := range mf.Layers {
		data, err := a.blob(l, l.MediaType)
		if err != nil {
			return nil, nil, err
		}
		switch l.MediaType {
		case "application/vnd.oci.image.layer.v1.tar+gzip":
			zr, err := gzip.NewReader(bytes.NewReader(data))
			if err != nil {
				return nil, nil, fmt.Errorf("layer %s: %w", l.Digest, err)
			}
			if data, err = io.ReadAll(zr); err != nil {
				return nil, nil, fmt.Errorf("layer %s: %w", l.Digest, err)
			}
		case "application/vnd.oci.image.layer.v1.tar":
		default:
			return nil, nil, fmt.Errorf("layer %s: media type %q", l.Digest, l.MediaType)
		}
		if got := sha256Digest(data); got != cfg.RootFS.DiffIDs[i] {
			return nil, nil, fmt.Errorf("layer %s: uncompressed %s, the config's diff ID %s", l.Digest, got, cfg.RootFS.DiffIDs[i])
		}
		layers = append(layers, data)
	}
	return cfg, layers, nil
}

// fsEntry is a file of an image's root filesystem.
type fsEntry struct {
	typ  byte // tar.TypeReg, TypeDir, TypeSymlink, TypeLink …
	mode int64
	link string // a link's target; a hard link's is a clean path
	data []byte
}

// imageFS is an image's root filesystem, by clean path without a leading /.
type imageFS map[string]*fsEntry

// cleanName is a tar entry's name as a key of an imageFS.
func cleanName(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// applyLayers unpacks layers in order, as containerd does: whiteouts
// remove what earlier layers made, opaque directories hide it.
func applyLayers(layers [][]byte) (imageFS, error) {
	fs := imageFS{}
	removeBelow := func(dir string) {
		for name := range fs {
			if strings.HasPrefix(name, dir+"/") {
				delete(fs, name)
			}
		}
	}
	for _, layer := range layers {
		tr := tar.NewReader(bytes.NewReader(layer))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, err
			}
			name := cleanName(h.Name)
			dir, base := path.Split(name)
			switch {
			case base == ".wh..wh..opq":
				removeBelow(strings.TrimSuffix(dir, "/"))
				continue
			case strings.HasPrefix(base, ".wh."):
				gone := dir + strings.TrimPrefix(base, ".wh.")
				delete(fs, gone)
				removeBelow(gone)
				continue
			}
			e := &fsEntry{typ: h.Typeflag, mode: h.Mode, link: h.Linkname}
			if h.Typeflag == tar.TypeLink {
				e.link = cleanName(h.Linkname)
			}
			if h.Typeflag == tar.TypeReg {
				if e.data, err = io.ReadAll(tr); err != nil {
					return nil, err
				}
			}
			fs[name] = e
		}
	}
	return fs, nil
}

// resolve follows symbolic links (of every component, as the kernel does,
// relative ones from their directory) and hard links to the file p names,
// and returns its path and entry.
func (fs imageFS) resolve(p string) (string, *fsEntry, error) {
	split := func(p string) []string {
		var out []string
		for _, c := range strings.Split(p, "/") {
			if c != "" && c != "." {
				out = append(out, c)
			}
		}
		return out
	}
	parts, cur := split(path.Clean("/"+p)), ""
	for hops := 0; len(parts) > 0; {
		next := path.Join(cur, parts[0])
		parts = parts[1:]
		e, ok := fs[next]
		if !ok {
			return "", nil, fmt.Errorf("/%s: no /%s in the image", p, next)
		}
		if e.typ != tar.TypeSymlink {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", nil, fmt.Errorf("/%s: too many levels of symbolic links", p)
		}
		target := e.link
		if !path.IsAbs(target) {
			target = path.Join("/", cur, target)
		}
		parts, cur = append(split(path.Clean(target)), parts...), ""
	}
	e := fs[cur]
	if e == nil {
		return "", nil, fmt.Errorf("/%s: the root directory", p)
	}
	if e.typ == tar.TypeLink {
		cur, e = e.link, fs[e.link]
		if e == nil || e.typ != tar.TypeReg {
			return "", nil, fmt.Errorf("/%s: a hard link to /%s, which is no file", p, cur)
		}
	}
	return cur, e, nil
}

// isELF says whether data is an ELF file.
func isELF(data []byte) bool { return bytes.HasPrefix(data, []byte(elf.ELFMAG)) }

// libraryDirs are where the dynamic loader of Debian's libc for machine
// looks for a library no run path gives: its multiarch directories first.
func libraryDirs(machine elf.Machine) []string {
	triplet := map[elf.Machine]string{elf.EM_AARCH64: "aarch64-linux-gnu", elf.EM_X86_64: "x86_64-linux-gnu"}[machine]
	return []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib", "/usr/lib"}
}

// checkELFFiles checks every ELF file of the image: built for machine, and
// everything it needs to load present in the image and built for it too:
// its interpreter and each DT_NEEDED library, searched for in its run paths
// and libraryDirs(machine) as the loader does. It returns how many it checked.
func checkELFFiles(fs imageFS, machine elf.Machine) (int, error) {
	var errs []error
	checked := 0
	for name, e := range fs {
		if e.typ != tar.TypeReg || !isELF(e.data) {
			continue
		}
		checked++
		f, err := elf.NewFile(bytes.NewReader(e.data))
		if err != nil {
			errs = append(errs, fmt.Errorf("/%s: %w", name, err))
			continue
		}
		if f.Machine != machine || f.Class != elf.ELFCLASS64 {
			errs = append(errs, fmt.Errorf("/%s: %v %v, want 64-bit %v", name, f.Class, f.Machine, machine))
			continue
		}
		if err := checkLoads(fs, "/"+name, f, machine); err != nil {
			errs = append(errs, err)
		}
	}
	return checked, errors.Join(errs...)
}

// checkLoads checks that the interpreter and the libraries the ELF file
// name needs are in the image, built for machine.
func checkLoads(fs imageFS, name string, f *elf.File, machine elf.Machine) error {
	isFor := func(p string) error {
		_, e, err := fs.resolve(p)
		if err != nil {
			return err
		}
		lf, err := elf.NewFile(bytes.NewReader(e.data))
		if err != nil || lf.Machine != machine {
			return fmt.Errorf("%s: not an ELF file for %v", p, machine)
		}
		return nil
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		interp, err := io.ReadAll(p.Open())
		if err != nil {
			return fmt.Errorf("%s: its interpreter: %w", name, err)
		}
		if err := isFor(strings.TrimRight(string(interp), "\x00")); err != nil {
			return fmt.Errorf("%s: its interpreter: %w", name, err)
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil // no dynamic section: nothing to load
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		paths, _ := f.DynString(tag)
		for _, p := range paths {
			for _, d := range strings.Split(p, ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", path.Dir(name)))
			}
		}
	}
	dirs = append(dirs, libraryDirs(machine)...)
	for _, lib := range needed {
		candidates := []string{lib}
		if !strings.Contains(lib, "/") {
			candidates = nil
			for _, d := range dirs {
				candidates = append(candidates, path.Join(d, lib))
			}
		}
		found := false
		for _, c := range candidates {
			if _, _, err := fs.resolve(c); err == nil {
				if err := isFor(c); err != nil {
					return fmt.Errorf("%s needs %s: %w", name, lib, err)
				}
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("%s needs %s, which is in none of %v", name, lib, dirs)
		}
	}
	return nil
}

// checkLinuxBinary checks that exe is what make builds of cmd/diskplane for
// linux/goarch: a static ELF for machine (no interpreter, no libraries),
// built by Go with -trimpath and cgo off, version stamped in.
func checkLinuxBinary(exe []byte, goarch string, machine elf.Machine, version string) error {
	f, err := elf.NewFile(bytes.NewReader(exe))
	if err != nil {
		return fmt.Errorf("not an ELF file: %w", err)
	}
	if f.Machine != machine {
		return fmt.Errorf("ELF machine %v, want %v", f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			return fmt.Errorf("dynamically linked (%v), want static", p.Type)
		}
	}
	info, settings, err := buildSettings(exe)
	if err != nil {
		return err
	}
	if info.Path != "github.com/diskplane/diskplane/cmd/diskplane" || settings["GOOS"] != "linux" || settings["GOARCH"] != goarch {
		return fmt.Errorf("built from %s for %s/%s, want linux/%s", info.Path, settings["GOOS"], settings["GOARCH"], goarch)
	}
	if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" {
		return fmt.Errorf("not built as make builds (-trimpath %q, CGO_ENABLED %q)", settings["-trimpath"], settings["CGO_ENABLED"])
	}
	if version == "" || bytes.Count(exe, []byte(version)) <= strings.Count(info.String(), version) {
		return fmt.Errorf("not stamped with version %q", version)
	}
	return nil
}
