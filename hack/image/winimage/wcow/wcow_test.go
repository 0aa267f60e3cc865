package wcow

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var when = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

// sidString renders a binary security identifier as S-1-….
func sidString(b []byte) (string, int) {
	n := int(b[1])
	var auth uint64
	for _, x := range b[2:8] {
		auth = auth<<8 | uint64(x)
	}
	s := fmt.Sprintf("S-%d-%d", b[0], auth)
	for i := range n {
		s += fmt.Sprintf("-%d", binary.LittleEndian.Uint32(b[8+4*i:]))
	}
	return s, 8 + 4*n
}

func TestMinimalHive(t *testing.T) {
	le := binary.LittleEndian
	h := MinimalHive("SYSTEM", when)
	if len(h) != 8192 || string(h[:4]) != "regf" || string(h[4096:4100]) != "hbin" {
		t.Fatalf("%d bytes, signatures %q %q", len(h), h[:4], h[4096:4100])
	}
	if got := le.Uint32(h[0x1fc:]); got != HiveChecksum(h[:4096]) {
		t.Errorf("checksum %#x, want %#x", got, HiveChecksum(h[:4096]))
	}
	if ft := le.Uint64(h[0x0c:]); ft != 134225248890000000 {
		t.Errorf("header time %d", ft)
	}
	bins := h[4096:]
	root := bins[le.Uint32(h[0x24:]):]
	if size := int32(le.Uint32(root)); size >= 0 || size%8 != 0 {
		t.Errorf("root cell size %d: not allocated or not aligned", size)
	}
	nk := root[4:]
	name := string(nk[0x4c : 0x4c+int(le.Uint16(nk[0x48:]))])
	if string(nk[:2]) != "nk" || le.Uint16(nk[2:]) != 0x2c || name != "SYSTEM" {
		t.Errorf("root key %q flags %#x name %q", nk[:2], le.Uint16(nk[2:]), name)
	}
	skOff := le.Uint32(nk[0x2c:])
	sk := bins[skOff+4:]
	if string(sk[:2]) != "sk" || le.Uint32(sk[4:]) != skOff || le.Uint32(sk[8:]) != skOff || le.Uint32(sk[12:]) != 1 {
		t.Errorf("security cell %q links %#x %#x refs %d", sk[:2], le.Uint32(sk[4:]), le.Uint32(sk[8:]), le.Uint32(sk[12:]))
	}
	// The security descriptor: owner, group and the three allowed ACEs.
	sd := sk[0x14 : 0x14+le.Uint32(sk[0x10:])]
	owner, _ := sidString(sd[le.Uint32(sd[4:]):])
	group, _ := sidString(sd[le.Uint32(sd[8:]):])
	if sd[0] != 1 || le.Uint16(sd[2:]) != 0x8004 || owner != "S-1-5-32-544" || group != "S-1-5-18" || le.Uint32(sd[12:]) != 0 {
		t.Errorf("descriptor revision %d control %#x owner %s group %s", sd[0], le.Uint16(sd[2:]), owner, group)
	}
	acl := sd[le.Uint32(sd[16:]):]
	var aces []string
	for i, off := 0, 8; i < int(le.Uint16(acl[4:])); i++ {
		who, _ := sidString(acl[off+8:])
		aces = append(aces, fmt.Sprintf("%d/%#x/%#x/%s", acl[off], acl[off+1], le.Uint32(acl[off+4:]), who))
		off += int(le.Uint16(acl[off+2:]))
	}
	want := "0/0x2/0xf003f/S-1-5-32-544 0/0x2/0xf003f/S-1-5-18 0/0x2/0x20019/S-1-5-32-545"
	if got := strings.Join(aces, " "); got != want || int(le.Uint16(acl[2:])) != 8+3*8+16+12+16 {
		t.Errorf("ACL of %d bytes: %s, want %s", le.Uint16(acl[2:]), got, want)
	}
	// The free cell ends the bin.
	free := skOff + uint32(-int32(le.Uint32(bins[skOff:])))
	if int(free+le.Uint32(bins[free:])) != hiveBinSize {
		t.Errorf("free cell at %#x of %d bytes does not end the bin", free, le.Uint32(bins[free:]))
	}
	if !bytes.Equal(h, MinimalHive("SYSTEM", when)) {
		t.Error("two hives of the same inputs differ")
	}
}

// TestMinimalHiveReadByHivex has hivex, an independent reader of registry
// hives (Debian's libhivex-bin, which hack/install-deps.sh installs), open
// every hive a base layer carries.
func TestMinimalHiveReadByHivex(t *testing.T) {
	if _, err := exec.LookPath("hivexml"); err != nil {
		t.Skip("!!! SKIPPED: needs hivexml (apt-get install libhivex-bin) !!!")
	}
	for _, name := range HiveNames {
		file := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(file, MinimalHive(name, when), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("hivexml", file).CombinedOutput()
		if err != nil || !strings.Contains(string(out), `<node name="`+name+`" root="1">`) {
			t.Errorf("hivexml %s: %v\n%s", name, err, out)
		}
	}
}

func TestHiveChecksum(t *testing.T) {
	base := make([]byte, 512)
	if HiveChecksum(base) != 1 {
		t.Error("an all-zero block's checksum is not 1")
	}
	binary.LittleEndian.PutUint32(base, 0xffffffff)
	if HiveChecksum(base) != 0xfffffffe {
		t.Error("an all-ones checksum is not 0xfffffffe")
	}
	binary.LittleEndian.PutUint32(base[4:], 0x0f)
	if HiveChecksum(base) != 0xfffffff0 {
		t.Errorf("checksum %#x", HiveChecksum(base))
	}
}

// readLayer returns a layer's headers and regular files' contents.
func readLayer(t *testing.T, layer []byte) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	var hs []*tar.Header
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hs, files
		}
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
		if h.Typeflag == tar.TypeReg {
			files[h.Name], _ = io.ReadAll(tr)
		}
	}
}

func TestBaseLayer(t *testing.T) {
	files := []File{{Path: "diskplane.exe", Data: []byte("exe")}, {Path: "Program Files/a/b.dll", Data: []byte("dll")}}
	layer, err := BaseLayer(files, when.Add(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	hs, contents := readLayer(t, layer)
	var names []string
	for _, h := range hs {
		names = append(names, h.Name)
		attr := map[byte]string{tar.TypeDir: "16", tar.TypeReg: "32"}[h.Typeflag]
		if h.PAXRecords[PAXFileAttributes] != attr || attr == "" {
			t.Errorf("%s: type %q attributes %q", h.Name, h.Typeflag, h.PAXRecords[PAXFileAttributes])
		}
		if !h.ModTime.Equal(when) || !h.AccessTime.Equal(when) || !h.ChangeTime.Equal(when) {
			t.Errorf("%s: times %v %v %v, want %v", h.Name, h.ModTime, h.AccessTime, h.ChangeTime, when)
		}
	}
	want := []string{"Files/", "Files/Program Files/", "Files/Program Files/a/", "Files/Program Files/a/b.dll",
		"Files/Windows/", "Files/Windows/System32/", "Files/Windows/System32/config/",
		"Files/Windows/System32/config/DEFAULT", "Files/Windows/System32/config/SAM", "Files/Windows/System32/config/SECURITY",
		"Files/Windows/System32/config/SOFTWARE", "Files/Windows/System32/config/SYSTEM", "Files/diskplane.exe"}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Errorf("entries\n%s\nwant\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	if string(contents["Files/diskplane.exe"]) != "exe" || !bytes.Equal(contents["Files/Windows/System32/config/SAM"], MinimalHive("SAM", when)) {
		t.Error("contents differ from what was given")
	}
	again, _ := BaseLayer([]File{files[1], files[0]}, when)
	if !bytes.Equal(layer, again) {
		t.Error("the same files in another order give another layer")
	}
}

func TestBaseLayerRefuses(t *testing.T) {
	for name, files := range map[string][]File{
		"an absolute path":        {{Path: "/x.exe"}},
		"a path leaving C:":       {{Path: "../x.exe"}},
		"an unclean path":         {{Path: "a//x.exe"}},
		"a backslash":             {{Path: `a\x.exe`}},
		"an alternate stream":     {{Path: "x.exe:zone"}},
		"an empty path":           {{Path: ""}},
		"a hive of its own":       {{Path: "Windows/System32/config/SYSTEM"}},
		"the same path twice":     {{Path: "x.exe"}, {Path: "x.exe"}},
		"paths equal but case":    {{Path: "x.exe"}, {Path: "X.EXE"}},
		"a file as a directory":   {{Path: "a"}, {Path: "a/x.exe"}},
		"a directory's case":      {{Path: "windows/x.exe"}},
		"a file in Windows' case": {{Path: "WINDOWS"}},
	} {
		if _, err := BaseLayer(files, when); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestTag(t *testing.T) {
	for name, want := range map[string]string{
		"ghcr.io/diskplane/diskplane-windows:v0.1.0-hostprocess": "v0.1.0-hostprocess",
		"localhost:5000/x:v1": "v1",
		"localhost:5000/x":    "",
		"x":                   "",
		"x:":                  "",
		"x@sha256:abcd":       "",
	} {
		got, err := Tag(name)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("Tag(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
}

func TestWriteLayout(t *testing.T) {
	layer, err := BaseLayer([]File{{Path: "x.exe", Data: []byte("x")}}, when)
	if err != nil {
		t.Fatal(err)
	}
	img := Image{Name: "example.com/x:v1", Created: when, Entrypoint: []string{"x.exe"}, Labels: map[string]string{"b": "2", "a": "1"}, Layer: layer}
	write := func(img Image) ([]byte, Descriptor) {
		var buf bytes.Buffer
		d, err := WriteLayout(&buf, img)
		if err != nil {
			t.Fatal(err)
		}
		return buf.Bytes(), d
	}
	first, d := write(img)
	second, _ := write(img)
	if !bytes.Equal(first, second) {
		t.Error("the same image gives two archives")
	}
	hs, files := readLayer(t, first)
	if len(hs) != 7 || hs[0].Name != LayoutFile || hs[len(hs)-1].Name != IndexFile {
		t.Errorf("%d entries, first %s, last %s", len(hs), hs[0].Name, hs[len(hs)-1].Name)
	}
	mf := files[BlobDir+"/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if digest(mf) != d.Digest || int64(len(mf)) != d.Size {
		t.Errorf("the manifest returned is not the one written")
	}
	if !strings.Contains(string(files[IndexFile]), `"io.containerd.image.name":"example.com/x:v1","org.opencontainers.image.ref.name":"v1"`) {
		t.Errorf("index %s", files[IndexFile])
	}
	img.Created = when.Add(time.Hour)
	if later, _ := write(img); bytes.Equal(first, later) {
		t.Error("another date gives the same archive")
	}
	if _, err := WriteLayout(io.Discard, Image{Name: "example.com/x", Layer: layer}); err == nil {
		t.Error("an image without a tag was written")
	}
}
