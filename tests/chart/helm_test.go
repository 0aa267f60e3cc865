// Package chart tests the Helm chart charts/diskplane with the pinned Helm
// binary (hack/chart/helm.sh builds it): lint, the default rendering, every
// option, and the values schema's refusal of bad values. Every rendered
// object of a built-in kind is decoded strictly, so a misspelt field in a
// template fails here rather than being dropped by the API server, and every
// flag the chart passes to the plugin is checked against the flags the
// plugin binary (built from this tree) really has.
package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// The environment the tests read: HELM names the Helm binary (default
// _output/tools/helm, what hack/chart/helm.sh builds). Without a Helm the
// tests skip loudly, unless RequireEnv is 1 (make test-chart and CI set it),
// which turns the skip into a failure.
const (
	helmEnv    = "HELM"
	RequireEnv = "DISKPLANE_REQUIRE_CHART_TESTS"
)

const (
	releaseName = "diskplane"
	namespace   = "kube-system"
	pluginImage = "ghcr.io/diskplane/diskplane"
)

var repoRoot = func() string {
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return dir
}()

var chartDir = filepath.Join(repoRoot, "charts", "diskplane")

// helm returns the Helm binary, or skips (fails under RequireEnv) when
// there is none.
func helm(t *testing.T) string {
	t.Helper()
	path := os.Getenv(helmEnv)
	if path == "" {
		path = filepath.Join(repoRoot, "_output", "tools", "helm")
	}
	if _, err := os.Stat(path); err == nil {
		return path
	}
	msg := fmt.Sprintf("!!! SKIPPED %s: no Helm at %s; run `make test-chart` (it builds the pinned Helm) !!!", t.Name(), path)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal(msg)
	}
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg)
	return ""
}

// runHelm runs helm with args and returns its stdout, stderr and error.
func runHelm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	home, err := os.MkdirTemp("", "chart-helm-home-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(home)
	// Helm keeps its cache, config and plugins here instead of in $HOME.
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return stdout.String(), stderr.String(), err
}

// valuesFile writes values (YAML) to a private file and returns its path.
// The directory's name does not come from the test's name: helm splits
// --values at commas.
func valuesFile(t *testing.T, values string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "chart-values-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(path, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// templateArgs are the arguments of `helm template` with values.
func templateArgs(t *testing.T, values string, extra ...string) []string {
	args := []string{"template", releaseName, chartDir, "--namespace", namespace}
	if values != "" {
		args = append(args, "--values", valuesFile(t, values))
	}
	return append(args, extra...)
}

// renderError renders with values and returns helm's error output; it
// fails the test when rendering succeeds.
func renderError(t *testing.T, values string) string {
	t.Helper()
	_, stderr, err := runHelm(t, templateArgs(t, values)...)
	if err == nil {
		t.Fatalf("helm template accepted values:\n%s", values)
	}
	return stderr
}

// manifest is what one `helm template` produced.
type manifest struct {
	t       *testing.T
	objects []*unstructured.Unstructured
}

// strictDecoder decodes built-in kinds and refuses unknown or duplicate
// fields.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// render renders the chart with values (YAML; empty for the defaults).
func render(t *testing.T, values string, extra ...string) *manifest {
	t.Helper()
	stdout, stderr, err := runHelm(t, templateArgs(t, values, extra...)...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	m := &manifest{t: t}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stdout)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("split rendered YAML: %v", err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		if len(u.Object) == 0 {
			continue
		}
		if scheme.Scheme.Recognizes(u.GroupVersionKind()) {
			if _, _, err := strictDecoder.Decode(doc, nil, nil); err != nil {
				t.Fatalf("%s %s does not decode strictly: %v", u.GetKind(), u.GetName(), err)
			}
		}
		m.objects = append(m.objects, u)
	}
	checkPluginFlags(t, m)
	return m
}

// find returns the object of kind and name, or nil.
func (m *manifest) find(kind, name string) *unstructured.Unstructured {
	for _, o := range m.objects {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// get returns the object of kind and name, failing the test without it.
func (m *manifest) get(kind, name string) *unstructured.Unstructured {
	m.t.Helper()
	o := m.find(kind, name)
	if o == nil {
		m.t.Fatalf("no %s %s rendered; have %v", kind, name, m.names())
	}
	return o
}

// names lists the rendered objects as Kind/name.
func (m *manifest) names() []string {
	var out []string
	for _, o := range m.objects {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}

// ofKind returns the objects of kind.
func (m *manifest) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range m.objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// decode converts a rendered object into its typed form.
func decode[T any](m *manifest, o *unstructured.Unstructured) *T {
	m.t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
		m.t.Fatalf("convert %s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return out
}

func (m *manifest) controller() *appsv1.Deployment {
	m.t.Helper()
	return decode[appsv1.Deployment](m, m.get("Deployment", "diskplane-controller"))
}

func (m *manifest) node() *appsv1.DaemonSet {
	m.t.Helper()
	return decode[appsv1.DaemonSet](m, m.get("DaemonSet", "diskplane-node"))
}

// container returns the container called name, or nil.
func container(spec corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	return nil
}

// containerNames lists the containers of spec.
func containerNames(spec corev1.PodSpec) []string {
	var out []string
	for _, c := range spec.Containers {
		out = append(out, c.Name)
	}
	return out
}

// env returns the variable called name, or nil.
func env(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// hasArg tells whether args contains arg exactly.
func hasArg(args []string, arg string) bool {
	for _, a := range args {
		if a == arg {
			return true
		}
	}
	return false
}

// argWithPrefix returns the first argument starting with prefix.
func argWithPrefix(args []string, prefix string) (string, bool) {
	for _, a := range args {
		if strings.HasPrefix(a, prefix) {
			return a, true
		}
	}
	return "", false
}

var (
	pluginFlagsOnce sync.Once
	pluginFlags     map[string]bool
	preStopFlags    map[string]bool // of diskplane pre-stop
	pluginFlagsErr  error
)

// flagLine matches a flag in the usage text of Go's flag package.
var flagLine = regexp.MustCompile(`^\s+-{1,2}([A-Za-z0-9][A-Za-z0-9_.-]*)`)

// loadPluginFlags builds cmd/diskplane from this tree and reads the flags
// of the plugin and of its pre-stop command from their -help output.
func loadPluginFlags() (plugin, preStop map[string]bool, err error) {
	bin := filepath.Join(os.TempDir(), fmt.Sprintf("diskplane-chart-test-%d", os.Getpid()))
	defer os.Remove(bin)
	build := exec.Command("go", "build", "-o", bin, "./cmd/diskplane")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("build cmd/diskplane: %w\n%s", err, out)
	}
	usage := func(args ...string) (map[string]bool, string) {
		out, _ := exec.Command(bin, args...).CombinedOutput()
		flags := map[string]bool{}
		for _, line := range strings.Split(string(out), "\n") {
			if m := flagLine.FindStringSubmatch(line); m != nil {
				flags[m[1]] = true
			}
		}
		return flags, string(out)
	}
	plugin, out := usage("-help")
	if !plugin["mode"] || !plugin["endpoint"] {
		return nil, nil, fmt.Errorf("no flags found in the plugin's -help output:\n%s", out)
	}
	preStop, out = usage("pre-stop", "-help")
	if !preStop["driver-name"] {
		return nil, nil, fmt.Errorf("no flags found in diskplane pre-stop -help:\n%s", out)
	}
	return plugin, preStop, nil
}

// checkPluginFlags fails the test when the chart passes the plugin, or its
// preStop hook, a flag they do not have.
func checkPluginFlags(t *testing.T, m *manifest) {
	t.Helper()
	pluginFlagsOnce.Do(func() { pluginFlags, preStopFlags, pluginFlagsErr = loadPluginFlags() })
	if pluginFlagsErr != nil {
		t.Fatal(pluginFlagsErr)
	}
	for _, o := range m.objects {
		var spec corev1.PodSpec
		switch o.GetKind() {
		case "Deployment":
			spec = decode[appsv1.Deployment](m, o).Spec.Template.Spec
		case "DaemonSet":
			spec = decode[appsv1.DaemonSet](m, o).Spec.Template.Spec
		default:
			continue
		}
		for _, c := range spec.Containers {
			if c.Name != "diskplane" {
				continue
			}
			for _, a := range c.Args {
				name := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-")
				if !pluginFlags[name] {
					t.Errorf("%s %s container %s passes %q: the plugin has no flag %q", o.GetKind(), o.GetName(), c.Name, a, name)
				}
			}
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
				continue
			}
			cmd := c.Lifecycle.PreStop.Exec.Command
			if binary := imageBinary(spec); len(cmd) < 2 || cmd[0] != binary || cmd[1] != "pre-stop" {
				t.Errorf("%s %s preStop hook %q, want %s pre-stop (the image's binary)", o.GetKind(), o.GetName(), cmd, binary)
				continue
			}
			for _, a := range cmd[2:] {
				if name := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-"); !preStopFlags[name] {
					t.Errorf("%s %s preStop hook passes %q: diskplane pre-stop has no flag %q", o.GetKind(), o.GetName(), a, name)
				}
			}
		}
	}
}

// imageBinary is where the plugin's image has its binary: the Linux image's
// /bin/diskplane, the Windows image's C:\diskplane.exe, which a HostProcess
// container finds among its files by name.
func imageBinary(spec corev1.PodSpec) string {
	switch {
	case spec.NodeSelector[corev1.LabelOSStable] != "windows":
		return "/bin/diskplane"
	case spec.SecurityContext != nil && spec.SecurityContext.WindowsOptions != nil && ptr.Deref(spec.SecurityContext.WindowsOptions.HostProcess, false):
		return "diskplane.exe"
	}
	return `C:\diskplane.exe`
}
