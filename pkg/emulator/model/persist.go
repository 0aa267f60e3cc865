package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// stateFile is the name of the saved state under the data directory.
const stateFile = "state.json"

// stateVersion is bumped when the saved format changes incompatibly.
const stateVersion = 1

// state is everything the cloud remembers; it is saved whole after every
// change.
type state struct {
	Version       int                      `json:"version"`
	Instances     map[string]*Instance     `json:"instances"`
	Volumes       map[string]*Volume       `json:"volumes"`
	Snapshots     map[string]*Snapshot     `json:"snapshots"`
	Modifications map[string]*Modification `json:"modifications"`
	// ModificationStarts are the start times of each volume's modifications
	// within the last day, for the rolling modification budget.
	ModificationStarts map[string][]time.Time `json:"modificationStarts,omitempty"`
	// Tokens are the ClientTokens of idempotent creations.
	Tokens map[string]*clientToken `json:"tokens"`
	// KeptImages are the IDs of images the data directory held when this
	// state began without a state file: they may be someone's data, so the
	// model never counts them as a crash's leftovers (removeUnknownImages).
	KeptImages []string `json:"keptImages,omitempty"`
}

// clientToken remembers what an idempotent request asked for and what it
// made, so a retry gets the same answer and a reuse with other parameters,
// or after what it made is gone, is refused.
type clientToken struct {
	Action    string   `json:"action"`
	Request   string   `json:"request"`
	VolumeIDs []string `json:"volumeIds"`
	// Created is when the token was first used; it is forgotten
	// ClientTokenTTL later.
	Created time.Time `json:"created,omitzero"`
}

func newState() *state {
	return &state{
		Version:            stateVersion,
		Instances:          map[string]*Instance{},
		Volumes:            map[string]*Volume{},
		Snapshots:          map[string]*Snapshot{},
		Modifications:      map[string]*Modification{},
		ModificationStarts: map[string][]time.Time{},
		Tokens:             map[string]*clientToken{},
	}
}

func (st *state) marshal() ([]byte, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode emulator state: %w", err)
	}
	return b, nil
}

// load reads the saved state, or starts empty when there is none; fromFile
// tells which, because only a saved state is the authority over what the
// data directory holds.
func (c *Cloud) load() (st *state, fromFile bool, err error) {
	if c.persist == nil {
		return newState(), false, nil
	}
	if err := removeTornWrites(filepath.Dir(c.persist.path)); err != nil {
		return nil, false, err
	}
	b, err := os.ReadFile(c.persist.path)
	if errors.Is(err, fs.ErrNotExist) {
		return newState(), false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read emulator state: %w", err)
	}
	st = newState()
	if err := json.Unmarshal(b, st); err != nil {
		return nil, false, fmt.Errorf("decode emulator state %s: %w", c.persist.path, err)
	}
	if st.Version != stateVersion {
		return nil, false, fmt.Errorf("emulator state %s has format version %d, this build reads %d", c.persist.path, st.Version, stateVersion)
	}
	// Maps missing from the file decode as nil; give them back their empty
	// values so the rest of the model never checks.
	fresh := newState()
	if st.Instances == nil {
		st.Instances = fresh.Instances
	}
	if st.Volumes == nil {
		st.Volumes = fresh.Volumes
	}
	if st.Snapshots == nil {
		st.Snapshots = fresh.Snapshots
	}
	if st.Modifications == nil {
		st.Modifications = fresh.Modifications
	}
	if st.ModificationStarts == nil {
		st.ModificationStarts = fresh.ModificationStarts
	}
	if st.Tokens == nil {
		st.Tokens = fresh.Tokens
	}
	return st, true, nil
}

// persister writes the state atomically: a temporary file in the same
// directory, fsync, rename over the old file, fsync of the directory. A
// crash at any point leaves either the old or the new state, never a torn
// one. Writes are shared (group commit): whoever writes serializes the
// newest state, and every caller whose generation it covers returns without
// writing again.
type persister struct {
	path     string
	snapshot func() (data []byte, generation uint64, err error)

	mu      sync.Mutex
	written uint64
}

func newPersister(dir string, snapshot func() ([]byte, uint64, error)) *persister {
	return &persister{path: filepath.Join(dir, stateFile), snapshot: snapshot}
}

// flush returns once generation want (or a newer one) is on disk.
func (p *persister) flush(want uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.written >= want {
		return nil
	}
	data, generation, err := p.snapshot()
	if err != nil {
		return err
	}
	if err := writeAtomic(p.path, data); err != nil {
		return err
	}
	p.written = generation
	return nil
}

// tempPattern names writeAtomic's temporary files in the data directory.
const tempPattern = stateFile + ".tmp-*"

// removeTornWrites deletes temporary files that a crash left before their
// rename: they hold a state that was never saved (possibly torn), and nothing
// else would ever remove them.
func removeTornWrites(dir string) error {
	torn, err := filepath.Glob(filepath.Join(dir, tempPattern))
	if err != nil {
		return fmt.Errorf("find unfinished state writes: %w", err)
	}
	for _, f := range torn {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove unfinished state write: %w", err)
		}
		klog.V(2).InfoS("Removed an unfinished state write", "path", f)
	}
	return nil
}

// writeAtomic replaces path with data crash-safely.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	f, err := os.CreateTemp(dir, tempPattern)
	if err != nil {
		return fmt.Errorf("save emulator state: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("save emulator state: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("save emulator state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save emulator state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("save emulator state: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("sync data dir: %w", err)
	}
	return nil
}
