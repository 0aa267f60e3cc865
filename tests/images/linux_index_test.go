package images

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/elf"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// The Linux image index `make image` (hack/image/build.sh) writes, checked
// by the tests below when it names them.
const (
	envImageIndex   = "DISKPLANE_IMAGE_INDEX"
	envImageVersion = "DISKPLANE_IMAGE_VERSION"
	// envRequireQemu turns the skip of the arm64 run under qemu-user, for
	// want of qemu-aarch64-static, into a failure.
	envRequireQemu = "DISKPLANE_REQUIRE_QEMU_TESTS"
)

// nodeTools are the programs the node plugin runs (pkg/mounter, and
// k8s.io/mount-utils under it): each must be in both images.
var nodeTools = []string{
	"mkfs.ext4", "mkfs.ext3", "e2fsck", "fsck.ext4", "resize2fs", "mkfs.xfs", "xfs_growfs", "xfs_io",
	"xfs_repair", "blkid", "lsblk", "losetup", "findmnt", "mount", "umount", "fsck", "cryptsetup",
}

// platformImage is one image of the index, unpacked.
type platformImage struct {
	config *ociConfig
	fs     imageFS
}

// readImageIndex reads the index archive make image names, or skips.
func readImageIndex(t *testing.T) (*ociIndexArchive, map[string]*platformImage, string) {
	t.Helper()
	file := os.Getenv(envImageIndex)
	if file == "" {
		t.Skipf("%s is not set: make image builds the index archive and runs this test on it", envImageIndex)
	}
	version := os.Getenv(envImageVersion)
	if version == "" {
		t.Fatalf("%s names no version to expect", envImageVersion)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	a, err := readOCIIndexArchive(b)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	images := map[string]*platformImage{}
	for _, m := range a.manifest {
		if m.Platform == nil {
			t.Fatalf("the index lists %s without a platform", m.Digest)
		}
		cfg, layers, err := a.image(m)
		if err != nil {
			t.Fatalf("%s/%s: %v", m.Platform.OS, m.Platform.Architecture, err)
		}
		fs, err := applyLayers(layers)
		if err != nil {
			t.Fatalf("%s/%s: %v", m.Platform.OS, m.Platform.Architecture, err)
		}
		images[m.Platform.OS+"/"+m.Platform.Architecture] = &platformImage{config: cfg, fs: fs}
	}
	return a, images, version
}

// TestLinuxImageIndex checks the index make image writes: linux/amd64 and
// linux/arm64, each configured for its platform with the Dockerfile's
// labels and entrypoint; in each, the plugin a static binary for the
// platform, every ELF file built for it with all it loads present, the
// node's tools, and the CA bundle (the same in both: the arm64 image's is
// written on the build machine, not by its package's script).
func TestLinuxImageIndex(t *testing.T) {
	a, images, version := readImageIndex(t)
	if a.refName == "" {
		t.Error("the index archive names no image (org.opencontainers.image.ref.name)")
	}
	var runtime *stage
	for _, s := range parse(t, "Dockerfile") {
		if s.name == "" {
			runtime = s
		}
	}
	if runtime == nil {
		t.Fatal("the Dockerfile has no unnamed final stage")
	}
	platforms := []struct {
		name    string
		arch    string
		machine elf.Machine
	}{
		{name: "linux/amd64", arch: "amd64", machine: elf.EM_X86_64},
		{name: "linux/arm64", arch: "arm64", machine: elf.EM_AARCH64},
	}
	if len(images) != len(platforms) {
		t.Fatalf("the index lists %d platforms, want linux/amd64 and linux/arm64", len(images))
	}
	for _, p := range platforms {
		t.Run(p.name, func(t *testing.T) {
			img := images[p.name]
			if img == nil {
				t.Fatalf("the index lists no %s image", p.name)
			}
			if img.config.OS != "linux" || img.config.Architecture != p.arch {
				t.Errorf("the %s image's config says %s/%s", p.name, img.config.OS, img.config.Architecture)
			}
			if !slices.Equal(img.config.Config.Entrypoint, runtime.entryJSON) {
				t.Errorf("entrypoint %q, the Dockerfile's %q", img.config.Config.Entrypoint, runtime.entryJSON)
			}
			for k, v := range expandedLabels(runtime, version) {
				if got := img.config.Config.Labels[k]; got != v {
					t.Errorf("label %s = %q, want %q", k, got, v)
				}
			}
			_, plugin, err := img.fs.resolve(runtime.entryJSON[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := checkLinuxBinary(plugin.data, p.arch, p.machine, version); err != nil {
				t.Errorf("%s: %v", runtime.entryJSON[0], err)
			}
			n, err := checkELFFiles(img.fs, p.machine)
			if err != nil {
				t.Error(err)
			}
			if n < len(nodeTools) {
				t.Errorf("%d ELF files in the image, fewer than the node's tools", n)
			}
			for _, tool := range nodeTools {
				_, e, err := img.fs.resolve("/usr/sbin/" + tool)
				if err != nil {
					_, e, err = img.fs.resolve("/usr/bin/" + tool)
				}
				if err != nil {
					t.Errorf("%s: in neither /usr/sbin nor /usr/bin", tool)
					continue
				}
				checkTool(t, tool, e)
			}
			// dpkg's status (what scanners read) lists the Dockerfile's
			// packages, and not those it purges.
			if _, status, err := img.fs.resolve("/var/lib/dpkg/status"); err != nil {
				t.Errorf("no dpkg status: %v", err)
			} else {
				installed := installedPackages(status.data)
				for _, p := range []string{"e2fsprogs", "xfsprogs", "util-linux", "mount", "cryptsetup-bin", "ca-certificates"} {
					if !installed[p] {
						t.Errorf("dpkg's status has no installed %s", p)
					}
				}
				if installed["python3"] || installed["libicu72"] {
					t.Error("dpkg's status lists python3 or libicu72, which the Dockerfile purges")
				}
			}
			for _, gone := range []string{"/usr/sbin/xfs_scrub", "/usr/bin/python3"} {
				if _, _, err := img.fs.resolve(gone); err == nil {
					t.Errorf("%s is in the image; the Dockerfile removes it", gone)
				}
			}
			_, bundle, err := img.fs.resolve("/etc/ssl/certs/ca-certificates.crt")
			if err != nil || len(bundle.data) == 0 || !x509.NewCertPool().AppendCertsFromPEM(bundle.data) {
				t.Fatalf("/etc/ssl/certs/ca-certificates.crt: no certificates (%v)", err)
			}
			// root first, uid and gid 0 (a locked password, *, where no shadow
			// file is made: the arm64 image runs no maintainer scripts).
			if _, passwd, err := img.fs.resolve("/etc/passwd"); err != nil ||
				!regexp.MustCompile(`^root:[x*]:0:0:`).Match(passwd.data) {
				t.Errorf("/etc/passwd has no root first (%v)", err)
			}
		})
	}
	if t.Failed() {
		return
	}
	bundle := func(platform string) []byte {
		_, e, _ := images[platform].fs.resolve("/etc/ssl/certs/ca-certificates.crt")
		return e.data
	}
	if !bytes.Equal(bundle("linux/amd64"), bundle("linux/arm64")) {
		t.Error("the CA bundles of linux/amd64 and linux/arm64 differ")
	}
}

// installedPackages returns the packages a dpkg status file says are
// installed.
func installedPackages(status []byte) map[string]bool {
	out := map[string]bool{}
	for _, stanza := range strings.Split(string(status), "\n\n") {
		var name string
		ok := false
		for _, line := range strings.Split(stanza, "\n") {
			if v, found := strings.CutPrefix(line, "Package: "); found {
				name = v
			}
			ok = ok || line == "Status: install ok installed"
		}
		if name != "" && ok {
			out[name] = true
		}
	}
	return out
}

// checkTool checks a node tool is an executable file.
func checkTool(t *testing.T, tool string, e *fsEntry) {
	t.Helper()
	if e.typ != tar.TypeReg || e.mode&0o111 == 0 {
		t.Errorf("%s: not an executable file (mode %o)", tool, e.mode)
	}
}

// TestLinuxImageIndexArm64UnderQemu runs the arm64 image's plugin and
// mkfs.ext4 with qemu-user (qemu-aarch64-static, Debian's qemu-user-static)
// on its root filesystem: the static checks above say the loader would find
// everything; this starts the programs.
func TestLinuxImageIndexArm64UnderQemu(t *testing.T) {
	_, images, version := readImageIndex(t)
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		testutil.SkipLoudly(t, envRequireQemu, "needs qemu-aarch64-static on PATH",
			"apt-get install qemu-user-static to start the arm64 image's programs")
	}
	img := images["linux/arm64"]
	if img == nil {
		t.Fatal("the index lists no linux/arm64 image")
	}
	root := t.TempDir()
	if err := writeFS(img.fs, root); err != nil {
		t.Fatal(err)
	}
	// A filesystem made, checked and probed in a file by the image's tools
	// (in order: each step uses the file the one before wrote).
	disk := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(disk, nil, 0o600); err != nil || os.Truncate(disk, 16<<20) != nil {
		t.Fatalf("a disk file: %v", err)
	}
	tests := []struct {
		argv []string
		want string
	}{
		{argv: []string{"/usr/bin/diskplane", "--version"}, want: version},
		{argv: []string{"/usr/sbin/mkfs.ext4", "-V"}, want: "mke2fs"},
		{argv: []string{"/usr/sbin/mkfs.xfs", "-V"}, want: "mkfs.xfs version"},
		{argv: []string{"/usr/sbin/cryptsetup", "--version"}, want: "cryptsetup"},
		{argv: []string{"/usr/sbin/mkfs.ext4", "-F", "-L", "arm64", disk}, want: "Writing superblocks"},
		{argv: []string{"/usr/sbin/e2fsck", "-fn", disk}, want: "arm64: "},
		{argv: []string{"/usr/sbin/blkid", "-p", disk}, want: `TYPE="ext4"`},
	}
	for _, tc := range tests {
		t.Run(path.Base(tc.argv[0])+" "+tc.argv[1], func(t *testing.T) {
			args := append([]string{"-L", root, filepath.Join(root, tc.argv[0])}, tc.argv[1:]...)
			out, err := exec.CommandContext(t.Context(), qemu, args...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("%v under qemu-user: %v\n%s", tc.argv, err, out)
			}
		})
	}
}

// writeFS writes an image's root filesystem below root: directories,
// files (hard links as copies) and symbolic links.
func writeFS(fs imageFS, root string) error {
	names := make([]string, 0, len(fs))
	for name := range fs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		e, dest := fs[name], filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
		switch e.typ {
		case tar.TypeDir:
			if err := os.MkdirAll(dest, 0o755); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(e.link, dest); err != nil {
				return err
			}
		case tar.TypeReg, tar.TypeLink:
			data := e.data
			if e.typ == tar.TypeLink {
				data = fs[e.link].data
			}
			if err := os.WriteFile(dest, data, os.FileMode(e.mode)&0o755|0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestImageFS checks the reading of an image's root filesystem the checks
// above rest on: links followed as the kernel follows them, layers applied
// with their whiteouts.
func TestImageFS(t *testing.T) {
	layer := func(entries ...tar.Header) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range entries {
			if h.Typeflag == tar.TypeReg {
				h.Size = int64(len(h.Name))
			}
			if err := tw.WriteHeader(&h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				_, _ = tw.Write([]byte(h.Name))
			}
		}
		_ = tw.Close()
		return buf.Bytes()
	}
	dir := func(n string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeDir, Mode: 0o755} }
	file := func(n string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o755} }
	link := func(n, to string, typ byte) tar.Header { return tar.Header{Name: n, Linkname: to, Typeflag: typ} }
	fs, err := applyLayers([][]byte{
		layer(dir("usr/"), dir("usr/lib/"), dir("usr/sbin/"), file("usr/lib/libc.so.6"),
			file("usr/sbin/mke2fs"), link("lib", "usr/lib", tar.TypeSymlink),
			link("usr/sbin/mkfs.ext4", "mke2fs", tar.TypeSymlink), link("usr/sbin/e2fsck", "usr/sbin/mke2fs", tar.TypeLink),
			link("sbin", "/usr/sbin", tar.TypeSymlink), link("loop", "loop", tar.TypeSymlink),
			dir("opt/"), file("opt/a"), file("usr/lib/gone")),
		layer(file("usr/lib/.wh.gone"), file("opt/.wh..wh..opq"), file("opt/b")),
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, want string // want "" for an error
	}{
		{path: "/lib/libc.so.6", want: "usr/lib/libc.so.6"},
		{path: "/sbin/mkfs.ext4", want: "usr/sbin/mke2fs"},
		{path: "sbin/e2fsck", want: "usr/sbin/mke2fs"},
		{path: "/lib/../sbin/mkfs.ext4", want: "usr/sbin/mke2fs"},
		{path: "/usr/lib/gone"},
		{path: "/opt/a"},
		{path: "/opt/b", want: "opt/b"},
		{path: "/loop"},
		{path: "/nothing"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			got, _, err := fs.resolve(tc.path)
			if (err != nil) != (tc.want == "") || got != tc.want {
				t.Fatalf("resolve(%q) = %q, %v; want %q", tc.path, got, err, tc.want)
			}
		})
	}
}
