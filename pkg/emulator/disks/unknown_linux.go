package disks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/klog/v2"
)

// imageFile is one volume or snapshot image of the store's layout.
type imageFile struct {
	id   string
	path string
}

// UnknownImages lists the IDs of the store's images that knownIDs does not
// name. Only regular files named <id>.img, with a volume ID under volumes/
// or a snapshot ID under snapshots/, are images.
func (s *loopStore) UnknownImages(knownIDs []string) ([]string, error) {
	unknown, err := s.unknownImages(knownIDs)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(unknown))
	for _, img := range unknown {
		ids = append(ids, img.id)
	}
	return ids, nil
}

// RemoveUnknownImages removes the images UnknownImages lists, except those a
// loop device is still bound to: Reconcile detaches a busy device of an
// unknown volume only lazily, and a filesystem mounted on it still writes to
// the image, so the image stays until a later start finds it free (removing
// it would free no space before then anyway).
func (s *loopStore) RemoveUnknownImages(dataDir string, knownIDs []string) ([]string, error) {
	if err := s.checkStateDir(dataDir); err != nil {
		return nil, err
	}
	unknown, err := s.unknownImages(knownIDs)
	if err != nil || len(unknown) == 0 {
		return nil, err
	}
	devs, err := listLoopDevices()
	if err != nil {
		return nil, fmt.Errorf("remove unknown images: %w", err)
	}
	inUse := make(map[string]string, len(devs))
	for _, d := range devs {
		inUse[strings.TrimSuffix(d.backingFile, deletedSuffix)] = d.path()
	}
	var removed []string
	var errs []error
	for _, img := range unknown {
		if dev, ok := inUse[img.path]; ok {
			klog.InfoS("Keeping an image the state does not know while a loop device still uses it; a later start removes it",
				"id", img.id, "device", dev)
			continue
		}
		unlock := s.locks.lock(img.id)
		err := removeImage(img.path)
		unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("remove unknown image of %s: %w", img.id, err))
			continue
		}
		removed = append(removed, img.id)
	}
	return removed, errors.Join(errs...)
}

// checkStateDir fails unless dataDir, resolved as NewLoopStore resolves its
// own, is the directory this store keeps its images in.
func (s *loopStore) checkStateDir(dataDir string) error {
	own := filepath.Dir(s.volumesDir)
	if dataDir == "" {
		return fmt.Errorf("remove unknown images: no state directory given; the images in %s are left alone", own)
	}
	abs, err := filepath.Abs(dataDir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return fmt.Errorf("remove unknown images: state directory %q: %w", dataDir, err)
	}
	if abs != own {
		return fmt.Errorf("remove unknown images: the state in %s does not describe the images in %s; removing none", dataDir, own)
	}
	return nil
}

// unknownImages lists the store's images whose IDs knownIDs does not name,
// sorted by ID.
func (s *loopStore) unknownImages(knownIDs []string) ([]imageFile, error) {
	known, err := knownImageIDs(knownIDs)
	if err != nil {
		return nil, err
	}
	all, err := s.images()
	if err != nil {
		return nil, err
	}
	unknown := slices.DeleteFunc(all, func(img imageFile) bool { return known[img.id] })
	slices.SortFunc(unknown, func(a, b imageFile) int { return strings.Compare(a.id, b.id) })
	return unknown, nil
}

// images lists the store's volume and snapshot images. Temporary files,
// other names, directories and symbolic links are not images, and a volumes
// or snapshots directory that is itself a symbolic link is refused: the
// store never looks for images outside its data directory.
func (s *loopStore) images() ([]imageFile, error) {
	kinds := []struct {
		dir      string
		validate func(string) error
	}{
		{dir: s.volumesDir, validate: validateVolumeID},
		{dir: s.snapshotsDir, validate: validateSnapshotID},
	}
	var out []imageFile
	for _, k := range kinds {
		st, err := os.Lstat(k.dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list images: %w", err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("list images: %s is not a directory (a symbolic link is not followed)", k.dir)
		}
		entries, err := os.ReadDir(k.dir)
		if err != nil {
			return nil, fmt.Errorf("list images: %w", err)
		}
		for _, e := range entries {
			id, ok := strings.CutSuffix(e.Name(), imageSuffix)
			if !ok || !e.Type().IsRegular() || k.validate(id) != nil {
				continue
			}
			out = append(out, imageFile{id: id, path: filepath.Join(k.dir, e.Name())})
		}
	}
	return out, nil
}
