package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValuesTable(t *testing.T) {
	const values = `# The file's own comment.

# The driver's name.
driverName: ebs.csi.diskplane.io
# The image.
image:
  repository: example.com/diskplane
  # Empty means v<appVersion>.
  tag: ""
plain:
  # How often, in a | b form.
  every: 1m
  list: []
  nothing: null
nodeSelector:
  kubernetes.io/os: linux
tolerations:
  - key: CriticalAddonsOnly
    operator: Exists
# The modes:
#   one    the first,
#          said twice
#   two    the second
# Then more \\.\pipe\x.
mode: one
`
	const want = "| value | default | what it does |\n|---|---|---|\n" +
		"| `driverName` | `ebs.csi.diskplane.io` | The driver's name. |\n" +
		"| `image` |  | The image. |\n" +
		"| `image.repository` | `example.com/diskplane` |  |\n" +
		"| `image.tag` | `\"\"` | Empty means v&lt;appVersion&gt;. |\n" +
		"| `plain.every` | `1m` | How often, in a \\| b form. |\n" +
		"| `plain.list` | `[]` |  |\n" +
		"| `plain.nothing` | `null` |  |\n" +
		"| `nodeSelector` | `{kubernetes.io/os: linux}` |  |\n" +
		"| `tolerations` | `[{key: CriticalAddonsOnly, operator: Exists}]` |  |\n" +
		"| `mode` | `one` | The modes:<br>`one` the first, said twice<br>`two` the second<br>Then more \\\\\\\\.\\\\pipe\\\\x. |\n"
	got, err := valuesTable([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("valuesTable =\n%s\nwant\n%s", got, want)
	}
}

func TestValuesTableRefuses(t *testing.T) {
	tests := []struct {
		name, values, want string
	}{
		{name: "not a mapping", values: "- a\n", want: "not a mapping"},
		{name: "key --set cannot name", values: "a:\n  b: 1\n\"c.d\": 2\n", want: `key "c.d"`},
		{name: "not YAML", values: "a: [\n", want: "did not find expected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := valuesTable([]byte(tc.values)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("valuesTable error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	readme := filepath.Join(dir, "README.md")
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(values, "# A.\na: 1\n")
	const head, tail = "# Chart\n\n", "\nMore text.\n"
	write(readme, head+beginMarker+"\n| stale |\n"+endMarker+tail)

	if err := run(values, readme, true); err == nil || !strings.Contains(err.Error(), "out of date") {
		t.Fatalf("check of a stale table: %v, want out of date", err)
	}
	if err := run(values, readme, false); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	want := head + beginMarker + "\n| value | default | what it does |\n|---|---|---|\n| `a` | `1` | A. |\n" + endMarker + tail
	if string(got) != want {
		t.Fatalf("README =\n%s\nwant\n%s", got, want)
	}
	if err := run(values, readme, true); err != nil {
		t.Fatalf("check of the table just written: %v", err)
	}

	write(readme, "# Chart without markers\n")
	if err := run(values, readme, false); err == nil || !strings.Contains(err.Error(), "no line") {
		t.Fatalf("README without markers: %v, want an error naming the marker", err)
	}
}
