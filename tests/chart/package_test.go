package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// chartMeta is what `helm show chart` says of an archive.
type chartMeta struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}

// TestChartPackage runs make chart-package's script and checks the archive
// a user installs from: named after the chart's version, carrying the
// versions given (or Chart.yaml's), and installing the plugin image of its
// appVersion.
func TestChartPackage(t *testing.T) {
	source := readChartMeta(t, filepath.Join(chartDir, "Chart.yaml"))
	tests := []struct {
		name                     string
		chartVersion, appVersion string
		want                     chartMeta
	}{
		{name: "Chart.yaml's versions", want: source},
		{name: "versions given", chartVersion: "0.9.0-rc.1", appVersion: "0.9.0",
			want: chartMeta{Name: source.Name, Version: "0.9.0-rc.1", AppVersion: "0.9.0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			cmd := exec.Command(filepath.Join(repoRoot, "hack", "chart", "package.sh"))
			cmd.Env = append(os.Environ(), helmEnv+"="+helm(t), "OUTPUT_DIR="+out,
				"CHART_VERSION="+tc.chartVersion, "APP_VERSION="+tc.appVersion)
			stdout, err := cmd.Output()
			if err != nil {
				t.Fatalf("package.sh: %v", err)
			}
			archive := strings.TrimSpace(string(stdout))
			if want := filepath.Join(out, "diskplane-"+tc.want.Version+".tgz"); archive != want {
				t.Fatalf("package.sh printed %q, want %q", archive, want)
			}
			shown, stderr, err := runHelm(t, "show", "chart", archive)
			if err != nil {
				t.Fatalf("helm show chart: %v\n%s", err, stderr)
			}
			var got chartMeta
			if err := yaml.Unmarshal([]byte(shown), &got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("packaged chart %+v, want %+v", got, tc.want)
			}
			rendered, stderr, err := runHelm(t, "template", releaseName, archive, "--namespace", namespace)
			if err != nil {
				t.Fatalf("helm template of the archive: %v\n%s", err, stderr)
			}
			if image := pluginImage + ":v" + tc.want.AppVersion; !strings.Contains(rendered, "image: "+image+"\n") {
				t.Fatalf("the archive does not install %s", image)
			}
		})
	}
	t.Run("bad version", func(t *testing.T) {
		cmd := exec.Command(filepath.Join(repoRoot, "hack", "chart", "package.sh"))
		cmd.Env = append(os.Environ(), helmEnv+"="+helm(t), "OUTPUT_DIR="+t.TempDir(), "CHART_VERSION=not-a-version")
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Fatalf("package.sh accepted CHART_VERSION=not-a-version:\n%s", out)
		}
	})
}

func readChartMeta(t *testing.T, path string) chartMeta {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m chartMeta
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
