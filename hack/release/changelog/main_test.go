package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelease checks the move of the Unreleased section under a release's
// heading, and the refusals that keep a release from losing or duplicating
// its notes.
func TestRelease(t *testing.T) {
	const preamble = "# Changelog\n\nWhat changes.\n\n"
	tests := []struct {
		name, in, version, date string
		want                    string // "" when refused
		wantErr                 string
	}{
		{
			name:    "first release",
			in:      preamble + "## Unreleased\n\n### Added\n\n- A thing.\n",
			version: "1.2.3", date: "2026-11-27",
			want: preamble + "## Unreleased\n\n## [1.2.3] - 2026-11-27\n\n### Added\n\n- A thing.\n",
		},
		{
			name:    "after an earlier release",
			in:      preamble + "## Unreleased\n\n- New.\n\n## [1.0.0] - 2026-01-02\n\n- Old.\n",
			version: "1.1.0-rc.1", date: "2026-11-27",
			want: preamble + "## Unreleased\n\n## [1.1.0-rc.1] - 2026-11-27\n\n- New.\n\n## [1.0.0] - 2026-01-02\n\n- Old.\n",
		},
		{name: "no Unreleased", in: preamble + "## [1.0.0] - 2026-01-02\n", version: "1.1.0", date: "2026-11-27", wantErr: "0 \"## Unreleased\" headings"},
		{name: "two Unreleased", in: "## Unreleased\n\n## Unreleased\n", version: "1.1.0", date: "2026-11-27", wantErr: "2 \"## Unreleased\" headings"},
		{name: "not a heading", in: "## Unreleased changes\n", version: "1.1.0", date: "2026-11-27", wantErr: "0 \"## Unreleased\""},
		{name: "released before", in: "## Unreleased\n\n## [1.0.0] - 2026-01-02\n", version: "1.0.0", date: "2026-11-27", wantErr: "already has a section for 1.0.0"},
		{name: "bad version", in: "## Unreleased\n", version: "1.0", date: "2026-11-27", wantErr: "version \"1.0\""},
		{name: "bad date", in: "## Unreleased\n", version: "1.0.0", date: "27.11.2026", wantErr: "date \"27.11.2026\""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := release([]byte(tc.in), tc.version, tc.date)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("release = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("release = %v\n%s\nwant\n%s", err, got, tc.want)
			}
		})
	}
}

// TestRun checks the command's files: the copy a CI release writes leaves
// the changelog as it was, a leading v of the version is dropped, and the
// changelog itself is released when no copy is named.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "CHANGELOG.md"), filepath.Join(dir, "copy.md")
	const text = "## Unreleased\n\n- A thing.\n"
	if err := os.WriteFile(in, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run("v2.0.0", "2026-11-27", in, out); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(in); string(b) != text {
		t.Errorf("the changelog changed: %q", b)
	}
	if b, _ := os.ReadFile(out); !strings.Contains(string(b), "## [2.0.0] - 2026-11-27\n") {
		t.Errorf("the copy: %q", b)
	}
	if err := run("", "2026-11-27", in, out); err == nil {
		t.Error("run without a version succeeded")
	}
	// In place, as RELEASE_CHANGELOG=1 asks.
	if err := run("2.0.0", "2026-11-27", in, ""); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(in); string(b) != "## Unreleased\n\n## [2.0.0] - 2026-11-27\n\n- A thing.\n" {
		t.Errorf("the changelog released in place: %q", b)
	}
}
