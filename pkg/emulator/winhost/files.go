package winhost

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/filetree"
)

// maxPath is Windows' MAX_PATH, which csi-proxy enforces.
const maxPath = 260

// absolutePath is a drive letter, a colon and a backslash.
var absolutePath = regexp.MustCompile(`^[a-zA-Z]:\\`)

// ValidatePath refuses what csi-proxy's filesystem API refuses: anything
// but an absolute path with a drive letter and backslashes, no longer than
// MAX_PATH, without "..", forward slashes or the characters Windows forbids
// in names.
func ValidatePath(path string) error {
	switch {
	case len(path) > maxPath:
		return fmt.Errorf("path length %d exceeds maximum characters: %d", len(path), maxPath)
	case strings.HasPrefix(path, `\`):
		return fmt.Errorf("invalid character \\ at beginning of path: %s", path)
	case !absolutePath.MatchString(path):
		return fmt.Errorf("not an absolute Windows path: %s", path)
	case strings.ContainsAny(path[3:], `"/:?*|`) || strings.Contains(path, ".."):
		return fmt.Errorf("path contains invalid characters: %s", path)
	}
	return nil
}

// canonical is the key a path is recorded under: Windows compares paths
// without regard to case, and a trailing backslash names the same
// directory.
func canonical(path string) string {
	p := strings.ToLower(strings.ReplaceAll(path, "/", `\`))
	if len(p) > 3 {
		p = strings.TrimRight(p, `\`)
	}
	return p
}

// parentPath is the directory above path; a drive's root is its own
// parent.
func parentPath(path string) string {
	p := strings.TrimRight(strings.ReplaceAll(path, "/", `\`), `\`)
	i := strings.LastIndex(p, `\`)
	if i <= 2 {
		return p[:min(len(p), 2)] + `\`
	}
	return p[:i]
}

// local is where a Windows path is on this machine's filesystem.
func (h *Host) local(path string) string {
	if h.cfg.Root == "" {
		return path
	}
	rest := strings.ReplaceAll(strings.TrimLeft(path[min(len(path), 2):], `\/`), `\`, "/")
	return filepath.Join(h.cfg.Root, filepath.FromSlash(rest))
}

// exists reports whether path names anything: a directory or file, a
// recorded symlink or mount point.
func (h *Host) exists(path string) (bool, error) {
	if _, ok := h.st.Links[canonical(path)]; ok {
		return true, nil
	}
	_, err := os.Lstat(h.local(path))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

// resolve follows symlinks until a path that is none.
func (h *Host) resolve(path string) (string, error) {
	for range 32 {
		target, ok := h.st.Links[canonical(path)]
		if !ok {
			return path, nil
		}
		path = target
	}
	return "", fmt.Errorf("resolve %s: too many levels of symbolic links", path)
}

// PathExists reports whether path exists.
func (h *Host) PathExists(path string) (bool, error) {
	var exists bool
	err := h.do("PathExists", func() (bool, error) {
		if err := ValidatePath(path); err != nil {
			return false, err
		}
		var err error
		exists, err = h.exists(path)
		return false, err
	})
	return exists, err
}

// PathValid reports whether every element of path exists, links followed.
func (h *Host) PathValid(path string) (bool, error) {
	var valid bool
	err := h.do("PathValid", func() (bool, error) {
		resolved, err := h.resolve(path)
		if err != nil {
			return false, err
		}
		valid, err = h.exists(resolved)
		return false, err
	})
	return valid, err
}

// Mkdir creates a directory and its parents.
func (h *Host) Mkdir(path string) error {
	return h.do("Mkdir", func() (bool, error) {
		if err := ValidatePath(path); err != nil {
			return false, err
		}
		return false, os.MkdirAll(h.local(path), 0o755)
	})
}

// Rmdir removes a directory: a symlink or mount point is removed as such
// (its target and volume untouched, as RemoveDirectory does); force removes
// a directory's contents too.
func (h *Host) Rmdir(path string, force bool) error {
	return h.do("Rmdir", func() (bool, error) {
		if err := ValidatePath(path); err != nil {
			return false, err
		}
		key := canonical(path)
		_, link := h.st.Links[key]
		_, mount := h.st.Mounts[key]
		delete(h.st.Links, key)
		delete(h.st.Mounts, key)
		changed := link || mount
		if force && !link {
			return changed, filetree.Remove(h.local(path))
		}
		return changed, os.Remove(h.local(path))
	})
}

// RmdirContents removes what a directory holds, keeping it.
func (h *Host) RmdirContents(path string) error {
	return h.do("RmdirContents", func() (bool, error) {
		if err := ValidatePath(path); err != nil {
			return false, err
		}
		entries, err := os.ReadDir(h.local(path))
		if err != nil {
			return false, err
		}
		for _, e := range entries {
			if err := filetree.Remove(filepath.Join(h.local(path), e.Name())); err != nil {
				return false, err
			}
		}
		return false, nil
	})
}

// CreateSymlink makes target a directory symlink to source. target must
// not exist and its parent must.
func (h *Host) CreateSymlink(source, target string) error {
	return h.do("CreateSymlink", func() (bool, error) {
		for _, p := range []string{source, target} {
			if err := ValidatePath(p); err != nil {
				return false, err
			}
		}
		exists, err := h.exists(target)
		if err != nil {
			return false, err
		}
		if exists {
			return false, fmt.Errorf("symlink %s %s: Cannot create a file when that file already exists", source, target)
		}
		if err := os.Mkdir(h.local(target), 0o755); err != nil {
			return false, fmt.Errorf("symlink %s %s: %w", source, target, err)
		}
		h.st.Links[canonical(target)] = source
		klog.V(2).InfoS("Created symlink", "path", target, "target", source)
		return true, nil
	})
}

// IsSymlink reports whether path is a symlink or mount point whose target
// exists, as csi-proxy's IsSymlink does; a path that does not exist is an
// error.
func (h *Host) IsSymlink(path string) (bool, error) {
	var is bool
	err := h.do("IsSymlink", func() (bool, error) {
		exists, err := h.exists(path)
		if err != nil {
			return false, err
		}
		if !exists {
			return false, fmt.Errorf("lstat %s: %w", path, os.ErrNotExist)
		}
		key := canonical(path)
		if v, ok := h.st.Mounts[key]; ok {
			_, _, _, verr := h.volume(v)
			is = verr == nil
			return false, nil
		}
		if target, ok := h.st.Links[key]; ok {
			resolved, err := h.resolve(target)
			if err != nil {
				return false, err
			}
			is, err = h.exists(resolved)
			return false, err
		}
		return false, nil
	})
	return is, err
}
