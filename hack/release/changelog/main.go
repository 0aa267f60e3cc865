// Command changelog moves CHANGELOG.md's Unreleased section under a
// release's heading, "## [X.Y.Z] - YYYY-MM-DD", and starts a fresh, empty
// Unreleased section above it, as the changelog's preamble promises a
// release does. make release (hack/release/release.sh) runs it: into the
// release directory by default, so that CI leaves the tree clean, and onto
// CHANGELOG.md itself when a maintainer cuts the release.
//
//	go run ./hack/release/changelog -version 1.2.3 [-date 2026-11-27] [-in CHANGELOG.md] [-out FILE]
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"time"
)

// unreleased is the heading the changelog gathers changes under until a
// release.
const unreleased = "## Unreleased"

// versionPattern is a release's version without its v: semantic versioning,
// with an optional pre-release (CI releases v0.0.0-ci).
var versionPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// release returns changelog with its Unreleased section headed
// "## [version] - date" and an empty Unreleased section before it. It
// refuses a changelog without exactly one Unreleased heading, a version
// that is already released, and a malformed version or date, so that a
// release cannot silently lose or duplicate its notes.
func release(changelog []byte, version, date string) ([]byte, error) {
	if !versionPattern.MatchString(version) {
		return nil, fmt.Errorf("version %q: want X.Y.Z or X.Y.Z-PRERELEASE, without a v", version)
	}
	if _, err := time.Parse(time.DateOnly, date); err != nil {
		return nil, fmt.Errorf("date %q: want YYYY-MM-DD", date)
	}
	heading := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(unreleased) + `[ \t]*$`)
	found := heading.FindAllIndex(changelog, -1)
	if len(found) != 1 {
		return nil, fmt.Errorf("the changelog has %d %q headings, want one", len(found), unreleased)
	}
	if regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(version) + `\]`).Match(changelog) {
		return nil, fmt.Errorf("the changelog already has a section for %s", version)
	}
	start, end := found[0][0], found[0][1]
	var out bytes.Buffer
	out.Write(changelog[:start])
	fmt.Fprintf(&out, "%s\n\n## [%s] - %s", unreleased, version, date)
	out.Write(changelog[end:])
	return out.Bytes(), nil
}

func main() {
	version := flag.String("version", "", "the release's version, X.Y.Z (a leading v is dropped)")
	date := flag.String("date", time.Now().UTC().Format(time.DateOnly), "the release's date, YYYY-MM-DD")
	in := flag.String("in", "CHANGELOG.md", "the changelog to read")
	out := flag.String("out", "", "where to write the released changelog (default: -in, in place)")
	flag.Parse()
	if err := run(*version, *date, *in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "changelog:", err)
		os.Exit(1)
	}
}

// run releases the changelog in as version on date into out (in when
// empty).
func run(version, date, in, out string) error {
	if version == "" {
		return errors.New("-version is required")
	}
	if version[0] == 'v' {
		version = version[1:]
	}
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	released, err := release(b, version, date)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if out == "" {
		out = in
	}
	return os.WriteFile(out, released, 0o644)
}
