//go:build release

// Package release checks the artifacts `make release` writes
// (hack/release/release.sh) as a user receives them: the checksums hold;
// the chart tgz is at the release's version and pins the plugin image by the
// digest of the image index in the OCI archive beside it, in its values and
// in every image reference the pinned Helm renders from it; the kustomize
// bundle pins the same digest; the SBOM is CycloneDX and lists every module
// the released binaries link, at the versions they link; the changelog has
// the release's section dated and an empty Unreleased above it. make
// test-release runs it on the latest release (DISKPLANE_RELEASE_DIR).
package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// The environment the tests read: the release directory, and the variable
// that turns their skip into a failure (make test-release sets it).
const (
	envReleaseDir = "DISKPLANE_RELEASE_DIR"
	envRequire    = "DISKPLANE_REQUIRE_RELEASE_TESTS"
	mainModule    = "github.com/diskplane/diskplane"
)

var repoRoot = func() string {
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return dir
}()

// releaseDir is a release's directory, with its version: vX.Y.Z and X.Y.Z.
type releaseDir struct {
	dir, version, semver string
}

// openRelease returns the release directory the environment names, or
// skips loudly.
func openRelease(t *testing.T) releaseDir {
	t.Helper()
	dir := os.Getenv(envReleaseDir)
	if dir == "" {
		testutil.SkipLoudly(t, envRequire, envReleaseDir+" names no release directory", "run make release VERSION=vX.Y.Z, then make test-release")
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatalf("%s: %v (run make release VERSION=vX.Y.Z first)", dir, err)
	}
	version := filepath.Base(real)
	if !strings.HasPrefix(version, "v") {
		t.Fatalf("%s: not a release directory named after its version", real)
	}
	return releaseDir{dir: real, version: version, semver: strings.TrimPrefix(version, "v")}
}

func (r releaseDir) path(name string) string { return filepath.Join(r.dir, name) }

func (r releaseDir) read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(r.path(name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestChecksums checks SHA256SUMS as `sha256sum -c` does, and that it
// covers every artifact of the release.
func TestChecksums(t *testing.T) {
	r := openRelease(t)
	listed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(r.read(t, "SHA256SUMS")))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("SHA256SUMS: bad line %q", sc.Text())
		}
		listed[name] = true
		if got := sha256Hex(r.read(t, name)); got != sum {
			t.Errorf("%s: sha256 %s, SHA256SUMS says %s", name, got, sum)
		}
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" && !listed[e.Name()] {
			t.Errorf("%s is not in SHA256SUMS", e.Name())
		}
	}
	for _, want := range []string{"CHANGELOG.md", "diskplane-index.oci.tar", "diskplane-" + r.semver + ".tgz",
		"diskplane-" + r.semver + ".yaml", "diskplane-" + r.semver + ".cdx.json"} {
		if !listed[want] {
			t.Errorf("the release has no %s", want)
		}
	}
}

// imageIndex is what the tests read of the index archive.
type imageIndex struct {
	digest string            // of the image index
	blobs  map[string][]byte // by digest
	images map[string][]byte // platform -> the plugin binary
}

// readIndex reads the release's index archive: the digest of its image
// index, and the plugin binary of each platform's image.
func readIndex(t *testing.T, r releaseDir) *imageIndex {
	t.Helper()
	idx := &imageIndex{blobs: map[string][]byte{}, images: map[string][]byte{}}
	tr := tar.NewReader(bytes.NewReader(r.read(t, "diskplane-index.oci.tar")))
	var top []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if name := filepath.Clean(h.Name); name == "index.json" {
			top = b
		} else if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			if sha256Hex(b) != hexDigest {
				t.Fatalf("%s does not hold its digest", name)
			}
			idx.blobs["sha256:"+hexDigest] = b
		}
	}
	type descriptor struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Platform  *struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
		} `json:"platform"`
	}
	var list struct {
		Manifests []descriptor `json:"manifests"`
		Layers    []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(top, &list); err != nil || len(list.Manifests) != 1 ||
		list.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Fatalf("index.json does not name one image index (%v): %s", err, top)
	}
	idx.digest = list.Manifests[0].Digest
	if err := json.Unmarshal(idx.blobs[idx.digest], &list); err != nil {
		t.Fatalf("the image index %s: %v", idx.digest, err)
	}
	for _, m := range list.Manifests {
		if m.Platform == nil {
			t.Fatalf("the image index lists %s without a platform", m.Digest)
		}
		platform := m.Platform.OS + "/" + m.Platform.Architecture
		var mf struct {
			Layers []descriptor `json:"layers"`
		}
		if err := json.Unmarshal(idx.blobs[m.Digest], &mf); err != nil {
			t.Fatalf("%s manifest: %v", platform, err)
		}
		for _, l := range mf.Layers {
			if exe := findFile(t, idx.blobs[l.Digest], "bin/diskplane"); exe != nil {
				idx.images[platform] = exe
			}
		}
	}
	return idx
}

// findFile returns the regular file of a gzipped layer whose path ends in
// suffix, or nil.
func findFile(t *testing.T, layer []byte, suffix string) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatalf("a layer: %v", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg && strings.HasSuffix(h.Name, "/"+suffix) {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

// runHelm runs the pinned Helm (HELM) and returns its output.
func runHelm(t *testing.T, args ...string) string {
	t.Helper()
	helm := os.Getenv("HELM")
	if helm == "" {
		helm = filepath.Join(repoRoot, "_output", "tools", "helm")
	}
	cmd := exec.Command(helm, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	scratch := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+scratch, "HELM_CONFIG_HOME="+scratch, "HELM_DATA_HOME="+scratch)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// pluginImages returns every image reference of the plugin's repository in
// rendered manifests.
func pluginImages(manifests, repository string) []string {
	var refs []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:-\s+)?image:\s*"?([^"\s]+)"?\s*$`).FindAllStringSubmatch(manifests, -1) {
		if strings.HasPrefix(m[1], repository+"@") || strings.HasPrefix(m[1], repository+":") {
			refs = append(refs, m[1])
		}
	}
	return refs
}

// TestChartPinsTheIndex checks the packaged chart: version and appVersion
// the release's, image.digest the index's, and every plugin image the
// pinned Helm renders from the tgz (and every one of the kustomize bundle)
// repository@digest.
func TestChartPinsTheIndex(t *testing.T) {
	r := openRelease(t)
	idx := readIndex(t, r)
	for _, platform := range []string{"linux/amd64", "linux/arm64"} {
		if idx.images[platform] == nil {
			t.Errorf("the image index has no %s image with the plugin", platform)
		}
	}
	tgz := r.path("diskplane-" + r.semver + ".tgz")
	var meta struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal([]byte(runHelm(t, "show", "chart", tgz)), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Version != r.semver || meta.AppVersion != r.semver {
		t.Errorf("the chart's version %q and appVersion %q, want %s", meta.Version, meta.AppVersion, r.semver)
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
			Digest     string `json:"digest"`
		} `json:"image"`
	}
	if err := yaml.Unmarshal([]byte(runHelm(t, "show", "values", tgz)), &values); err != nil {
		t.Fatal(err)
	}
	if values.Image.Digest != idx.digest {
		t.Fatalf("the chart pins image.digest %q, the index archive's digest is %s", values.Image.Digest, idx.digest)
	}
	want := values.Image.Repository + "@" + idx.digest
	for name, manifests := range map[string]string{
		"helm template of the chart": runHelm(t, "template", "diskplane", tgz, "--namespace", "kube-system"),
		"the kustomize bundle":       string(r.read(t, "diskplane-"+r.semver+".yaml")),
	} {
		refs := pluginImages(manifests, values.Image.Repository)
		if len(refs) < 2 {
			t.Errorf("%s: %d images of %s, want the controller's and the node's", name, len(refs), values.Image.Repository)
		}
		for _, ref := range refs {
			if ref != want {
				t.Errorf("%s: image %s, want %s", name, ref, want)
			}
		}
	}
}

// TestSBOM checks the SBOM: CycloneDX, describing the main module, and
// listing every module each released binary links (its Go build
// information, as `go version -m` prints it) at the version it links, and
// nothing that `go list -m all` does not have.
func TestSBOM(t *testing.T) {
	r := openRelease(t)
	var bom struct {
		BOMFormat   string `json:"bomFormat"`
		SpecVersion string `json:"specVersion"`
		Metadata    struct {
			Component struct {
				Name string `json:"name"`
			} `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			PURL    string `json:"purl"`
		} `json:"components"`
	}
	if err := json.Unmarshal(r.read(t, "diskplane-"+r.semver+".cdx.json"), &bom); err != nil {
		t.Fatalf("the SBOM: %v", err)
	}
	if bom.BOMFormat != "CycloneDX" || !strings.HasPrefix(bom.SpecVersion, "1.") {
		t.Fatalf("the SBOM is %q %q, want CycloneDX 1.x", bom.BOMFormat, bom.SpecVersion)
	}
	if bom.Metadata.Component.Name != mainModule {
		t.Errorf("the SBOM describes %q, want %s", bom.Metadata.Component.Name, mainModule)
	}
	listed := map[string]string{}
	for _, c := range bom.Components {
		if !strings.HasPrefix(c.PURL, "pkg:golang/") {
			t.Errorf("component %s: purl %q is no Go module's", c.Name, c.PURL)
		}
		listed[c.Name] = c.Version
	}

	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}} {{.Version}}{{with .Replace}} {{.Path}} {{.Version}}{{end}}", "all").Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	all := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			all[f[0]] = f[1]
		}
	}
	for name, version := range listed {
		if all[name] != version {
			t.Errorf("the SBOM lists %s %s; go list -m all has %q", name, version, all[name])
		}
	}

	idx := readIndex(t, r)
	for _, platform := range slices.Sorted(maps.Keys(idx.images)) {
		info, err := buildinfo.Read(bytes.NewReader(idx.images[platform]))
		if err != nil {
			t.Fatalf("%s: the plugin's build information: %v", platform, err)
		}
		if info.Main.Path != mainModule {
			t.Errorf("%s: the plugin is of module %s", platform, info.Main.Path)
		}
		if len(info.Deps) == 0 {
			t.Errorf("%s: the plugin links no modules", platform)
		}
		for _, d := range info.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			if got, ok := listed[d.Path]; !ok || got != d.Version {
				t.Errorf("%s: the plugin links %s %s; the SBOM lists %q", platform, d.Path, d.Version, got)
			}
		}
	}
}

// TestChangelog checks the released changelog: the release's section,
// dated the day the release was made, under an empty Unreleased section.
func TestChangelog(t *testing.T) {
	r := openRelease(t)
	fi, err := os.Stat(r.path("CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	day := fi.ModTime().UTC().Format(time.DateOnly)
	if today := time.Now().UTC().Format(time.DateOnly); day != today {
		t.Logf("the release was made on %s, not today (%s)", day, today)
	}
	text := string(r.read(t, "CHANGELOG.md"))
	heading := fmt.Sprintf("## [%s] - %s\n", r.semver, day)
	before, after, ok := strings.Cut(text, heading)
	if !ok {
		t.Fatalf("the changelog has no %q", strings.TrimSpace(heading))
	}
	unreleased, ok := strings.CutSuffix(strings.TrimRight(before, "\n"), "## Unreleased")
	if !ok || strings.Contains(unreleased, "\n## ") {
		t.Errorf("the release's section is not right under an empty ## Unreleased:\n%s", before)
	}
	if strings.TrimSpace(after) == "" {
		t.Error("the release's section is empty")
	}
}
