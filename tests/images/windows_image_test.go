package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The Windows image archives `make image-windows` (hack/image/windows.sh)
// writes, checked by the tests below when it names them: the HostProcess
// image, and the csi-proxy flavour built with buildah on stand-in bases.
const (
	envHostProcessImage = "DISKPLANE_WINDOWS_IMAGE"
	envImageName        = "DISKPLANE_WINDOWS_IMAGE_NAME"
	envNanoServerCheck  = "DISKPLANE_WINDOWS_NANOSERVER_CHECK"
	envVersion          = "DISKPLANE_WINDOWS_VERSION"
)

// windowsStage returns stage name of Dockerfile.windows.
func windowsStage(t *testing.T, name string) *stage {
	t.Helper()
	for _, s := range parse(t, "Dockerfile.windows") {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("Dockerfile.windows has no stage %s", name)
	return nil
}

// expandedLabels are the stage's labels as a build with VERSION=version
// sets them.
func expandedLabels(s *stage, version string) map[string]string {
	out := map[string]string{}
	for k, v := range s.labels {
		out[k] = strings.NewReplacer("${VERSION}", version, "$VERSION", version).Replace(v)
	}
	return out
}

// chartHostProcessImage is the image the chart runs in HostProcess mode by
// default: node.windows.image.repository, tagged v<appVersion>-hostprocess.
func chartHostProcessImage(t *testing.T) string {
	t.Helper()
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Node struct {
			Windows struct {
				Image struct {
					Repository string `json:"repository"`
				} `json:"image"`
			} `json:"windows"`
		} `json:"node"`
	}
	for file, into := range map[string]any{"Chart.yaml": &chart, "values.yaml": &values} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "charts/diskplane", file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	return values.Node.Windows.Image.Repository + ":v" + chart.AppVersion + "-hostprocess"
}

// containerPath is where a Windows image's path p (C:\x, /x or x) lies
// relative to the container's C:\, with forward slashes.
func containerPath(p string) string {
	p = strings.ReplaceAll(p, `\`, "/")
	if len(p) >= 2 && p[1] == ':' {
		p = p[2:]
	}
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}

// readArchive reads the archive an environment variable names, or skips.
func readArchive(t *testing.T, env string) (*ociImage, string) {
	t.Helper()
	file := os.Getenv(env)
	if file == "" {
		t.Skipf("%s is not set: make image-windows builds the archive and runs this test on it", env)
	}
	version := os.Getenv(envVersion)
	if version == "" {
		t.Fatalf("%s names no version to expect", envVersion)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	img, err := readOCIArchive(b)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return img, version
}

// TestWindowsHostProcessImage checks the HostProcess image make
// image-windows writes: a valid OCI layout, named as the chart expects, a
// windows/amd64 image that any Windows version matches (no os.version, no
// platform in the index), one Windows base layer holding the base hives and
// exactly what the Dockerfile's hostprocess stage copies, its entrypoint,
// user and labels, and the copied diskplane.exe a Windows amd64 program of
// the expected version.
func TestWindowsHostProcessImage(t *testing.T) {
	img, version := readArchive(t, envHostProcessImage)
	want := os.Getenv(envImageName)
	if want == "" {
		want = chartHostProcessImage(t)
	}
	if img.name != want || !strings.HasSuffix(want, ":"+img.refName) {
		t.Errorf("image named %q (reference %q), want %q", img.name, img.refName, want)
	}
	if img.indexEntry.Platform != nil {
		t.Errorf("the index gives the image a platform (%s): containerd 1.7 would refuse it on other Windows versions", *img.indexEntry.Platform)
	}
	c := img.config
	if c.OS != "windows" || c.Architecture != "amd64" || c.OSVersion != "" {
		t.Errorf("config platform %s/%s version %q, want windows/amd64 without os.version", c.OS, c.Architecture, c.OSVersion)
	}
	if len(img.layers) != 1 {
		t.Fatalf("%d layers, want one base layer", len(img.layers))
	}
	files, err := checkWindowsBaseLayer(img.layers[0])
	if err != nil {
		t.Fatalf("the layer: %v", err)
	}

	st := windowsStage(t, "hostprocess")
	wantFiles := map[string]bool{}
	for _, h := range baseHives {
		wantFiles["Windows/System32/config/"+h] = true
	}
	for dest := range st.copies {
		wantFiles[containerPath(dest)] = true
	}
	if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, slices.Sorted(maps.Keys(wantFiles))) {
		t.Errorf("the layer holds %q, want %q", got, slices.Sorted(maps.Keys(wantFiles)))
	}
	if !slices.Equal(c.Config.Entrypoint, st.entryJSON) || c.Config.Cmd != nil || c.Config.User != st.user {
		t.Errorf("entrypoint %q cmd %q user %q, want %q, none, %q", c.Config.Entrypoint, c.Config.Cmd, c.Config.User, st.entryJSON, st.user)
	}
	if wantLabels := expandedLabels(st, version); !maps.Equal(c.Config.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", c.Config.Labels, wantLabels)
	}
	// hivex, a reader of registry hives of its own, opens each as well.
	if _, err := exec.LookPath("hivexml"); err != nil {
		t.Log("!!! hivexml is missing (apt-get install libhivex-bin): the hives were read by this test alone !!!")
	} else {
		for _, h := range baseHives {
			file := filepath.Join(t.TempDir(), h)
			if err := os.WriteFile(file, files["Windows/System32/config/"+h], 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("hivexml", file).CombinedOutput(); err != nil {
				t.Errorf("hivexml %s: %v\n%s", h, err, out)
			}
		}
	}
	// HostProcess containers resolve a relative entrypoint in the image's
	// files (%CONTAINER_SANDBOX_MOUNT_POINT%, the layer's Files/).
	exe, ok := files[containerPath(st.entryJSON[0])]
	if !ok {
		t.Fatalf("the entrypoint %s is not in the layer", st.entryJSON[0])
	}
	if err := checkWindowsBinary(exe, version); err != nil {
		t.Errorf("%s: %v", st.entryJSON[0], err)
	}
}

// TestWindowsNanoServerStage checks the image buildah built from
// Dockerfile.windows's nanoserver stage (the csi-proxy flavour) on an empty
// stand-in for Nano Server: a windows/amd64 image with the stage's user,
// entrypoint and labels, whose entrypoint is the file its COPY put there,
// the diskplane.exe the builder stage built with the version asked for. Its
// layers are buildah's (Linux layers): only a Windows builder writes Nano
// Server's.
func TestWindowsNanoServerStage(t *testing.T) {
	img, version := readArchive(t, envNanoServerCheck)
	st := windowsStage(t, "nanoserver")
	c := img.config
	if c.OS != "windows" || c.Architecture != "amd64" {
		t.Errorf("config platform %s/%s, want windows/amd64", c.OS, c.Architecture)
	}
	if !slices.Equal(c.Config.Entrypoint, st.entryJSON) || c.Config.User != st.user || st.user == "" {
		t.Errorf("entrypoint %q user %q, want %q and %q", c.Config.Entrypoint, c.Config.User, st.entryJSON, st.user)
	}
	labels := maps.Clone(c.Config.Labels)
	delete(labels, "io.buildah.version")
	if wantLabels := expandedLabels(st, version); !maps.Equal(labels, wantLabels) {
		t.Errorf("labels %v, want %v", labels, wantLabels)
	}
	entry := containerPath(st.entryJSON[0])
	if _, copied := st.copies["/"+entry]; !copied {
		t.Errorf("the entrypoint %s is not what the stage copies (%v)", st.entryJSON[0], st.copies)
	}
	var exe []byte // the entrypoint as the last layer that has it leaves it
	for i, layer := range img.layers {
		tr := tar.NewReader(bytes.NewReader(layer))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("layer %d: %v", i, err)
			}
			if containerPath(h.Name) == entry && h.Typeflag == tar.TypeReg {
				if exe, err = io.ReadAll(tr); err != nil {
					t.Fatalf("layer %d: %v", i, err)
				}
			}
		}
	}
	if exe == nil {
		t.Fatalf("no layer holds the entrypoint %s", entry)
	}
	if err := checkWindowsBinary(exe, version); err != nil {
		t.Errorf("%s: %v", entry, err)
	}
}

// TestDockerfileVariablesAreDeclared checks what a builder would expand to
// nothing without a word: a FROM line uses only ARGs declared before the
// first FROM, and an instruction of a stage only the stage's own ARGs. The
// Windows stages run as the chart expects: the csi-proxy flavour as
// ContainerAdministrator, the HostProcess flavour as the pod says.
func TestDockerfileVariablesAreDeclared(t *testing.T) {
	for _, file := range []string{"Dockerfile", "Dockerfile.windows"} {
		for _, s := range parse(t, file) {
			for _, v := range s.fromRefs {
				if !s.globalArgs[v] {
					t.Errorf("%s: FROM of stage %q uses $%s, not an ARG before the first FROM", file, s.name, v)
				}
			}
			for _, v := range s.refs {
				if !s.args[v] {
					t.Errorf("%s: stage %q uses $%s, not one of its ARGs", file, s.name, v)
				}
			}
		}
	}
	if u := windowsStage(t, "nanoserver").user; u != "ContainerAdministrator" {
		t.Errorf("the nanoserver stage runs as %q, want ContainerAdministrator", u)
	}
	if u := windowsStage(t, "hostprocess").user; u != "" {
		t.Errorf("the hostprocess stage sets USER %q; the pod's runAsUserName decides", u)
	}
}
