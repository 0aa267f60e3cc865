package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/pe"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// The checks of the image archives, written apart from the code that writes
// them (hack/image/winimage/wcow) from what the OCI image specification and
// the readers on a Windows node (containerd, hcsshim) ask.

// ociDescriptor is a descriptor of an OCI index or manifest.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *json.RawMessage  `json:"platform"`
}

// ociConfig is what the checks read of an image configuration.
type ociConfig struct {
	OS           string `json:"os"`
	OSVersion    string `json:"os.version"`
	Architecture string `json:"architecture"`
	Config       struct {
		User       string            `json:"User"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// ociImage is the one image of an OCI image layout archive, its blobs
// checked against their descriptors.
type ociImage struct {
	name, refName string
	indexEntry    ociDescriptor
	config        ociConfig
	layerTypes    []string
	layers        [][]byte // uncompressed
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// readLayoutFiles returns the files of an OCI image layout's tar archive by
// their cleaned paths. Directories are skipped; any other entry that is not
// a regular file, or a path that comes twice, is an error: a layout holds
// only files, once each.
func readLayoutFiles(archive []byte) (map[string][]byte, error) {
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("the archive: %w", err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%s: not a regular file", h.Name)
		}
		name := path.Clean(h.Name)
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("%s twice in the archive", name)
		}
		if files[name], err = io.ReadAll(tr); err != nil {
			return nil, err
		}
	}
}

// readOCIArchive reads an OCI image layout from a tar archive holding one
// image and checks it: the layout marker, every blob stored under its own
// digest, each descriptor's digest and size those of its blob, each layer's
// uncompressed digest the diff ID the configuration gives it.
func readOCIArchive(archive []byte) (*ociImage, error) {
	files, err := readLayoutFiles(archive)
	if err != nil {
		return nil, err
	}
	var layout struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(files["oci-layout"], &layout); err != nil || layout.Version != "1.0.0" {
		return nil, fmt.Errorf("oci-layout %q: not an OCI image layout 1.0.0 (%v)", files["oci-layout"], err)
	}
	for name, data := range files {
		hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/")
		if !ok {
			if name != "oci-layout" && name != "index.json" {
				return nil, fmt.Errorf("%s: not part of an OCI image layout", name)
			}
			continue
		}
		if got := sha256Digest(data); got != "sha256:"+hexDigest {
			return nil, fmt.Errorf("%s holds %s", name, got)
		}
	}
	blob := func(what string, d ociDescriptor, mediaTypes ...string) ([]byte, error) {
		if !strings.Contains(" "+strings.Join(mediaTypes, " ")+" ", " "+d.MediaType+" ") {
			return nil, fmt.Errorf("%s: media type %q, want one of %q", what, d.MediaType, mediaTypes)
		}
		hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
		data, found := files["blobs/sha256/"+hexDigest]
		if !ok || !found {
			return nil, fmt.Errorf("%s: no blob %s", what, d.Digest)
		}
		if int64(len(data)) != d.Size {
			return nil, fmt.Errorf("%s: descriptor size %d, blob %d bytes", what, d.Size, len(data))
		}
		return data, nil
	}

	var index struct {
		SchemaVersion int             `json:"schemaVersion"`
		MediaType     string          `json:"mediaType"`
		Manifests     []ociDescriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	if index.SchemaVersion != 2 || len(index.Manifests) != 1 {
		return nil, fmt.Errorf("index.json: schema %d with %d manifests, want schema 2 with one", index.SchemaVersion, len(index.Manifests))
	}
	img := &ociImage{indexEntry: index.Manifests[0]}
	img.name = img.indexEntry.Annotations["io.containerd.image.name"]
	img.refName = img.indexEntry.Annotations["org.opencontainers.image.ref.name"]
	mfData, err := blob("manifest", img.indexEntry, "application/vnd.oci.image.manifest.v1+json")
	if err != nil {
		return nil, err
	}
	var mf struct {
		SchemaVersion int             `json:"schemaVersion"`
		MediaType     string          `json:"mediaType"`
		Config        ociDescriptor   `json:"config"`
		Layers        []ociDescriptor `json:"layers"`
	}
	if err := json.Unmarshal(mfData, &mf); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if mf.SchemaVersion != 2 || mf.MediaType != img.indexEntry.MediaType {
		return nil, fmt.Errorf("manifest: schema %d, media type %q", mf.SchemaVersion, mf.MediaType)
	}
	cfgData, err := blob("config", mf.Config, "application/vnd.oci.image.config.v1+json")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(cfgData, &img.config); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if img.config.RootFS.Type != "layers" || len(img.config.RootFS.DiffIDs) != len(mf.Layers) {
		return nil, fmt.Errorf("config: rootfs %q with %d diff IDs for %d layers", img.config.RootFS.Type, len(img.config.RootFS.DiffIDs), len(mf.Layers))
	}
	for i, d := range mf.Layers {
		what := fmt.Sprintf("layer %d", i)
		data, err := blob(what, d, "application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.v1.tar+gzip")
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(d.MediaType, "+gzip") {
			zr, err := gzip.NewReader(bytes.NewReader(data))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			if data, err = io.ReadAll(zr); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
		}
		if got := sha256Digest(data); got != img.config.RootFS.DiffIDs[i] {
			return nil, fmt.Errorf("%s: uncompressed digest %s, the config's diff ID %s", what, got, img.config.RootFS.DiffIDs[i])
		}
		img.layerTypes = append(img.layerTypes, d.MediaType)
		img.layers = append(img.layers, data)
	}
	return img, nil
}

// baseHives are the registry hives a Windows base layer carries in
// Files/Windows/System32/config: the Host Compute Service links them into
// the layer's Hives directory when it imports the layer.
var baseHives = []string{"DEFAULT", "SAM", "SECURITY", "SOFTWARE", "SYSTEM"}

// checkWindowsBaseLayer checks an uncompressed layer the way containerd on
// Windows imports a layer with no parent (hcsshim's base layer writer) and
// returns its regular files by their path in the container (below Files/):
// every entry below Files/ (the container's C:\), each created in a
// directory an earlier entry made, once (without regard to case, as NTFS
// compares names), only directories and regular files (a base layer cannot
// remove files), Win32 attributes in MSWINDOWS.fileattr decimal and
// consistent with the entry's type, no Hives/ (the import makes it from the
// hives, and fails when it is there), and the base hives present.
func checkWindowsBaseLayer(layer []byte) (map[string][]byte, error) {
	files := map[string][]byte{}
	made := map[string]bool{} // directories, folded to lower case
	tr := tar.NewReader(bytes.NewReader(layer))
	for first := true; ; first = false {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the layer: %w", err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		folded := strings.ToLower(name)
		switch {
		case first && (name != "Files" || h.Typeflag != tar.TypeDir):
			return nil, fmt.Errorf("%s: the layer does not start with the directory Files", h.Name)
		case name != "Files" && !strings.HasPrefix(name, "Files/"):
			return nil, fmt.Errorf("%s: outside Files/, not in the container's C:\\ (Hives/ and UtilityVM/ have no place in this base layer)", h.Name)
		case path.Clean(name) != name || strings.Contains(name, `\`) || strings.Contains(name, ":"):
			return nil, fmt.Errorf("%s: not a clean name of a file (alternate data streams, backslashes)", h.Name)
		case strings.HasPrefix(path.Base(name), ".wh."):
			return nil, fmt.Errorf("%s: a whiteout in a base layer", h.Name)
		case h.Typeflag != tar.TypeDir && h.Typeflag != tar.TypeReg:
			return nil, fmt.Errorf("%s: type %q, want a directory or a regular file", h.Name, h.Typeflag)
		case made[folded] || files[name] != nil:
			return nil, fmt.Errorf("%s: written twice", h.Name)
		case name != "Files" && !made[strings.ToLower(path.Dir(name))]:
			return nil, fmt.Errorf("%s: its directory was not made before it", h.Name)
		}
		if a, ok := h.PAXRecords["MSWINDOWS.fileattr"]; ok {
			attr, err := strconv.ParseUint(a, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("%s: MSWINDOWS.fileattr %q is not a decimal number", h.Name, a)
			}
			if isDir := attr&0x10 != 0; isDir != (h.Typeflag == tar.TypeDir) {
				return nil, fmt.Errorf("%s: attributes %#x do not match the entry's type", h.Name, attr)
			}
		}
		if h.Typeflag == tar.TypeDir {
			made[folded] = true
			continue
		}
		for other := range files {
			if strings.EqualFold(other, name) {
				return nil, fmt.Errorf("%s and %s: one file on Windows", other, name)
			}
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[name] = data
	}
	out := map[string][]byte{}
	for name, data := range files {
		out[strings.TrimPrefix(name, "Files/")] = data
	}
	for _, hive := range baseHives {
		data, ok := out["Windows/System32/config/"+hive]
		if !ok {
			return nil, fmt.Errorf("no hive Files/Windows/System32/config/%s", hive)
		}
		if err := checkHive(data); err != nil {
			return nil, fmt.Errorf("hive %s: %w", hive, err)
		}
	}
	return out, nil
}

// checkHive checks a registry hive file as far as loading it reads it: the
// base block ("regf", equal sequence numbers, format 1.x, its checksum),
// the bins it announces ("hbin", each at its own offset, 4 KiB multiples),
// cells that tile each bin exactly, a root key cell ("nk", the hive's
// entry) and its security cell ("sk"). An empty file, which the HostProcess
// base image v1.0.0 carried, fails.
func checkHive(h []byte) error {
	le := binary.LittleEndian
	if len(h) < 4096+4096 || string(h[:4]) != "regf" {
		return fmt.Errorf("%d bytes without a base block and a bin", len(h))
	}
	if le.Uint32(h[4:]) != le.Uint32(h[8:]) {
		return fmt.Errorf("sequence numbers %d and %d: not written completely", le.Uint32(h[4:]), le.Uint32(h[8:]))
	}
	if le.Uint32(h[0x14:]) != 1 || le.Uint32(h[0x1c:]) != 0 || le.Uint32(h[0x20:]) != 1 {
		return fmt.Errorf("version %d.%d, type %d, format %d", le.Uint32(h[0x14:]), le.Uint32(h[0x18:]), le.Uint32(h[0x1c:]), le.Uint32(h[0x20:]))
	}
	var sum uint32
	for off := 0; off < 0x1fc; off += 4 {
		sum ^= le.Uint32(h[off:])
	}
	if sum == 0 {
		sum = 1
	} else if sum == 0xffffffff {
		sum = 0xfffffffe
	}
	if got := le.Uint32(h[0x1fc:]); got != sum {
		return fmt.Errorf("base block checksum %#x, computed %#x", got, sum)
	}
	bins := h[4096:]
	if size := le.Uint32(h[0x28:]); int(size) != len(bins) || size%4096 != 0 {
		return fmt.Errorf("bins of %d bytes announced, %d there", size, len(bins))
	}
	cells := map[uint32][]byte{} // allocated cells by offset
	for off := 0; off < len(bins); {
		bin := bins[off:]
		size := int(le.Uint32(bin[8:]))
		if string(bin[:4]) != "hbin" || int(le.Uint32(bin[4:])) != off || size%4096 != 0 || size == 0 || size > len(bin) {
			return fmt.Errorf("bin at %#x: bad header", off)
		}
		for c := 32; c < size; {
			n := int(int32(le.Uint32(bin[c:])))
			used := n < 0
			if used {
				n = -n
			}
			if n < 8 || n%8 != 0 || c+n > size {
				return fmt.Errorf("cell at %#x: size %d", off+c, n)
			}
			if used {
				cells[uint32(off+c)] = bin[c+4 : c+n]
			}
			c += n
		}
		off += size
	}
	root, ok := cells[le.Uint32(h[0x24:])]
	if !ok || len(root) < 0x4c || string(root[:2]) != "nk" || le.Uint16(root[2:])&0x4 == 0 {
		return fmt.Errorf("no root key cell at %#x", le.Uint32(h[0x24:]))
	}
	if sk, ok := cells[le.Uint32(root[0x2c:])]; !ok || len(sk) < 0x14 || string(sk[:2]) != "sk" {
		return fmt.Errorf("the root key's security cell is missing")
	}
	return nil
}

// checkWindowsBinary checks that exe is what `make build-windows` makes of
// cmd/diskplane for the image: a Windows console program for amd64, built
// by Go for windows/amd64, static and with -trimpath, version stamped in.
func checkWindowsBinary(exe []byte, version string) error {
	f, err := pe.NewFile(bytes.NewReader(exe))
	if err != nil {
		return fmt.Errorf("not a PE executable: %w", err)
	}
	if f.Machine != pe.IMAGE_FILE_MACHINE_AMD64 {
		return fmt.Errorf("PE machine %#x, want amd64", f.Machine)
	}
	if oh, ok := f.OptionalHeader.(*pe.OptionalHeader64); !ok || oh.Subsystem != pe.IMAGE_SUBSYSTEM_WINDOWS_CUI {
		return fmt.Errorf("not a 64-bit Windows console program")
	}
	info, settings, err := buildSettings(exe)
	if err != nil {
		return err
	}
	if info.Path != "github.com/diskplane/diskplane/cmd/diskplane" || settings["GOOS"] != "windows" || settings["GOARCH"] != "amd64" {
		return fmt.Errorf("built from %s for %s/%s", info.Path, settings["GOOS"], settings["GOARCH"])
	}
	// -trimpath leaves -ldflags out of the build information; the version
	// -X stamped in is a string of the program's own, beyond the build
	// information's text.
	if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" {
		return fmt.Errorf("not built as make builds (-trimpath %q, CGO_ENABLED %q)", settings["-trimpath"], settings["CGO_ENABLED"])
	}
	if version == "" || bytes.Count(exe, []byte(version)) <= strings.Count(info.String(), version) {
		return fmt.Errorf("not stamped with version %q", version)
	}
	return nil
}

// buildSettings returns a Go program's build information and its settings
// (GOOS, GOARCH, CGO_ENABLED, -trimpath …) by key.
func buildSettings(exe []byte) (*debug.BuildInfo, map[string]string, error) {
	info, err := buildinfo.Read(bytes.NewReader(exe))
	if err != nil {
		return nil, nil, fmt.Errorf("no Go build information: %w", err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	return info, settings, nil
}
