// Package docs keeps README.md and docs/*.md honest where a machine can
// check them: every message they quote is one the code can emit
// (messages_test.go), and every time figure they give as measured says when
// and at which commit it was measured (figures_test.go). Flags and metrics
// are checked next to the binaries that define them (TestFlagsDocumented,
// TestMetricsDocumented). The tests read files only: they are fast and need
// no root.
package docs

import (
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository's root, seen from this package's directory.
var repoRoot = filepath.Join("..", "..")

// pages returns README.md and every page of docs/, as paths from repoRoot.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md under %s: %v", repoRoot, err)
	}
	return append([]string{filepath.Join(repoRoot, "README.md")}, docs...)
}

// pageName names a page the way the repository does (docs/design.md).
func pageName(path string) string {
	rel, err := filepath.Rel(repoRoot, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(rel)
}

// excerpt shortens text for a failure message.
func excerpt(text string) string {
	const most = 160
	if r := []rune(text); len(r) > most {
		return strings.TrimSpace(string(r[:most])) + " …"
	}
	return text
}
