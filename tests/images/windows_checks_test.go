package images

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/diskplane/diskplane/hack/image/winimage/wcow"
)

// The checks of the Windows image archives must refuse what a Windows node
// would refuse, or run wrongly: these tests hand them broken layers, hives
// and archives and expect each refused, and a good one accepted.

var testTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// tarEntry is an entry of a tar the tests write.
type tarEntry struct {
	h    tar.Header
	data []byte
}

// entries reads a tar into its entries.
func entries(t *testing.T, b []byte) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{*h, data})
	}
}

// writeTar writes entries as a tar.
func writeTar(t *testing.T, es []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := e.h
		h.Size = int64(len(e.data))
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// goodLayer is a base layer as winimage writes it, with a stand-in binary.
func goodLayer(t *testing.T) []byte {
	t.Helper()
	layer, err := wcow.BaseLayer([]wcow.File{{Path: "diskplane.exe", Data: []byte("MZ stand-in")}}, testTime)
	if err != nil {
		t.Fatal(err)
	}
	return layer
}

func TestWindowsBaseLayerCheck(t *testing.T) {
	files, err := checkWindowsBaseLayer(goodLayer(t))
	if err != nil {
		t.Fatalf("a layer winimage writes is refused: %v", err)
	}
	if string(files["diskplane.exe"]) != "MZ stand-in" || len(files) != 1+len(baseHives) {
		t.Errorf("files %v", files)
	}

	dir := func(name string) tarEntry {
		return tarEntry{h: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: testTime}}
	}
	file := func(name string, data []byte) tarEntry {
		return tarEntry{h: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, ModTime: testTime}, data: data}
	}
	hive := wcow.MinimalHive("SYSTEM", testTime)
	// mutate returns the good layer changed by f.
	mutate := func(f func([]tarEntry) []tarEntry) []byte {
		return writeTar(t, f(entries(t, goodLayer(t))))
	}
	tests := map[string][]byte{
		// A Linux-style layer: the file would not be in the container's C:\.
		"plain layer": writeTar(t, []tarEntry{file("diskplane.exe", []byte("MZ"))}),
		// The HostProcess base image v1.0.0's hives: empty files.
		"empty hives": mutate(func(es []tarEntry) []tarEntry {
			for i := range es {
				if strings.Contains(es[i].h.Name, "System32/config/") {
					es[i].data = nil
				}
			}
			return es
		}),
		"a hive missing": mutate(func(es []tarEntry) []tarEntry {
			var out []tarEntry
			for _, e := range es {
				if !strings.HasSuffix(e.h.Name, "/SAM") {
					out = append(out, e)
				}
			}
			return out
		}),
		"a Hives directory": mutate(func(es []tarEntry) []tarEntry { return append(es, dir("Hives/")) }),
		"a file before its directory": mutate(func(es []tarEntry) []tarEntry {
			return append([]tarEntry{es[0], file("Files/Program Files/x.dll", nil)}, es[1:]...)
		}),
		"a symlink": mutate(func(es []tarEntry) []tarEntry {
			return append(es, tarEntry{h: tar.Header{Typeflag: tar.TypeSymlink, Name: "Files/link", Linkname: "diskplane.exe"}})
		}),
		"a whiteout":           mutate(func(es []tarEntry) []tarEntry { return append(es, file("Files/.wh.old.exe", nil)) }),
		"names equal but case": mutate(func(es []tarEntry) []tarEntry { return append(es, file("Files/DiskPlane.exe", nil)) }),
		"an alternate stream":  mutate(func(es []tarEntry) []tarEntry { return append(es, file("Files/diskplane.exe:zone", nil)) }),
		"directory attributes on a file": mutate(func(es []tarEntry) []tarEntry {
			e := file("Files/x.txt", nil)
			e.h.PAXRecords = map[string]string{"MSWINDOWS.fileattr": "16"}
			e.h.Format = tar.FormatPAX
			return append(es, e)
		}),
		"a hive with a bad checksum": mutate(func(es []tarEntry) []tarEntry {
			for i := range es {
				if strings.HasSuffix(es[i].h.Name, "/SYSTEM") {
					bad := bytes.Clone(hive)
					bad[0x1fc] ^= 1
					es[i].data = bad
				}
			}
			return es
		}),
	}
	for name, layer := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := checkWindowsBaseLayer(layer); err == nil {
				t.Error("accepted")
			} else {
				t.Log(err)
			}
		})
	}
}

func TestHiveCheck(t *testing.T) {
	good := wcow.MinimalHive("SOFTWARE", testTime)
	if err := checkHive(good); err != nil {
		t.Fatalf("a hive winimage writes is refused: %v", err)
	}
	le := binary.LittleEndian
	tests := map[string]func(h []byte) []byte{
		"empty":                           func([]byte) []byte { return nil },
		"half written (sequence numbers)": func(h []byte) []byte { le.PutUint32(h[8:], 2); return h },
		"truncated":                       func(h []byte) []byte { return h[:4096+2048] },
		"no root key": func(h []byte) []byte {
			le.PutUint32(h[0x24:], 0x400)
			le.PutUint32(h[0x1fc:], wcow.HiveChecksum(h))
			return h
		},
		"a cell overrunning its bin": func(h []byte) []byte {
			overrun := int32(-8192)
			le.PutUint32(h[4096+32:], uint32(overrun))
			return h
		},
	}
	for name, f := range tests {
		t.Run(name, func(t *testing.T) {
			if err := checkHive(f(bytes.Clone(good))); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestOCIArchiveCheck(t *testing.T) {
	var buf bytes.Buffer
	if _, err := wcow.WriteLayout(&buf, wcow.Image{Name: "example.com/x/y:v1", Created: testTime, Entrypoint: []string{"y.exe"}, Layer: goodLayer(t)}); err != nil {
		t.Fatal(err)
	}
	img, err := readOCIArchive(buf.Bytes())
	if err != nil {
		t.Fatalf("an archive winimage writes is refused: %v", err)
	}
	if img.name != "example.com/x/y:v1" || img.refName != "v1" || img.config.OS != "windows" || len(img.layers) != 1 {
		t.Errorf("read %+v", img)
	}
	good := entries(t, buf.Bytes())
	// change returns the archive with the entries whose name has suffix
	// changed by f.
	change := func(suffix string, f func([]byte) []byte) []byte {
		es := make([]tarEntry, len(good))
		copy(es, good)
		for i := range es {
			if strings.HasSuffix(es[i].h.Name, suffix) {
				es[i].data = f(bytes.Clone(es[i].data))
			}
		}
		return writeTar(t, es)
	}
	layer := "" // winimage writes the layer as the first blob
	for _, e := range good {
		if strings.HasPrefix(e.h.Name, "blobs/sha256/") && len(e.data) > 0 && layer == "" {
			layer = e.h.Name
		}
	}
	tests := map[string][]byte{
		"a blob not its digest":   change(layer, func(b []byte) []byte { b[len(b)/2] ^= 1; return b }),
		"no layout marker":        change("oci-layout", func([]byte) []byte { return []byte("{}") }),
		"an index size that lies": change("index.json", func(b []byte) []byte { return bytes.Replace(b, []byte(`"size":`), []byte(`"size":1`), 1) }),
	}
	for name, archive := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := readOCIArchive(archive); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestWindowsBinaryCheckRefusesOtherPrograms(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	elf, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"not a program": []byte("MZ stand-in"), "this Linux test": elf} {
		if err := checkWindowsBinary(b, "v0.0.0"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
