// Package filetree removes directory trees in a way that also works for
// Windows programs run under Wine 8.0, where Go 1.26's os.RemoveAll fails
// ("Invalid function": its Windows implementation deletes through
// NtSetInformationFile with POSIX semantics, which Wine does not support,
// and falls back only on error codes Wine does not return). The Windows
// node's emulator and every test that also runs under Wine use it.
package filetree

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Remove removes path and everything below it with os.Remove, deepest
// first. A path that does not exist is no error.
func Remove(path string) error {
	var paths []string
	err := filepath.WalkDir(path, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	sort.Sort(sort.Reverse(sort.StringSlice(paths)))
	for _, p := range paths {
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	return nil
}
