package winhost

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// stateFile is the name of the saved state in the data directory.
const stateFile = "state.json"

// state is everything the host remembers.
type state struct {
	// Disks are the layouts of every volume the host has seen, attached or
	// not, by EBS volume ID.
	Disks map[string]*Disk `json:"disks"`
	// Numbers are the disk numbers of the attached volumes.
	Numbers map[string]uint32 `json:"numbers"`
	// Mounts are the volume mount points: canonical path to volume ID.
	Mounts map[string]string `json:"mounts"`
	// Links are the directory symlinks: canonical path to target path.
	Links map[string]string `json:"links"`
}

func load(dir string) (*state, error) {
	st := &state{Disks: map[string]*Disk{}, Numbers: map[string]uint32{}, Mounts: map[string]string{}, Links: map[string]string{}}
	if dir == "" {
		return st, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, stateFile), err)
	}
	return st, nil
}

// save writes the state whole: a temporary file renamed over the old one,
// so a crash leaves the old state or the new, never a torn one.
func save(dir string, st *state) error {
	if dir == "" {
		return nil
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

// SetDisk records what a volume holds, as if it had been written by
// another system: a test or the emulator's admin API lays out a disk (a
// foreign partition, an MBR, a RAW volume) before it is attached. An
// attached disk keeps its number and online state.
func (h *Host) SetDisk(d Disk) error {
	if d.VolumeID == "" {
		return errors.New("set disk: a volume ID is required")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.st.Disks[d.VolumeID]; ok {
		d.Online = old.Online
	}
	h.st.Disks[d.VolumeID] = &d
	return save(h.cfg.DataDir, h.st)
}

// DiskView is a disk as the host shows it now, for tests and the admin API.
type DiskView struct {
	Disk
	// Number is the disk number while attached; Attached says whether it is.
	Number   uint32 `json:"number"`
	Attached bool   `json:"attached"`
	// MountPoints are the paths each volume is mounted at, by volume ID.
	MountPoints map[string][]string `json:"mountPoints,omitempty"`
}

// Disks returns every disk the host has seen, attached ones first by
// number, then the others by volume ID.
func (h *Host) Disks() ([]DiskView, error) {
	var out []DiskView
	err := h.do("Disks", func() (bool, error) {
		for id, d := range h.st.Disks {
			n, attached := h.st.Numbers[id]
			v := DiskView{Disk: *d, Number: n, Attached: attached, MountPoints: map[string][]string{}}
			v.Partitions = nil
			for _, p := range d.Partitions {
				pc := *p
				if p.Volume != nil {
					vc := *p.Volume
					pc.Volume = &vc
					if mps := h.mountedVolumes(vc.ID); len(mps) > 0 {
						v.MountPoints[vc.ID] = mps
					}
				}
				v.Partitions = append(v.Partitions, &pc)
			}
			out = append(out, v)
		}
		return false, nil
	})
	slices.SortFunc(out, func(a, b DiskView) int {
		switch {
		case a.Attached != b.Attached:
			if a.Attached {
				return -1
			}
			return 1
		case a.Attached && a.Number != b.Number:
			return int(a.Number) - int(b.Number)
		}
		return cmpString(a.VolumeID, b.VolumeID)
	})
	return out, err
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Reboot restarts the host as far as its disks go: each attached disk gets
// a number again, the others in the reverse order of the numbers they had,
// as Windows numbers disks in the order it finds them at boot, which need
// not be the order they arrived in. Volume mount points, symlinks and each
// disk's online state stay, as Windows keeps them.
func (h *Host) Reboot() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.refresh(); err != nil {
		return err
	}
	ids := make([]string, 0, len(h.st.Numbers))
	for id, n := range h.st.Numbers {
		if n != 0 {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int { return int(h.st.Numbers[b]) - int(h.st.Numbers[a]) })
	for i, id := range ids {
		h.st.Numbers[id] = uint32(i + 1)
	}
	return save(h.cfg.DataDir, h.st)
}

// CopyDisk records that volume to holds what volume from holds now, as a
// snapshot of from restored as to would: the same partitions, formats and
// use, what another system wrote; its Windows volumes get IDs of their own
// (Windows gives a copied disk new ones when it resolves the collision of
// the two disks' signatures). It arrives offline, like any disk.
func (h *Host) CopyDisk(from, to string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.refresh(); err != nil {
		return err
	}
	src, ok := h.st.Disks[from]
	if !ok {
		return fmt.Errorf("copy disk: the host has never seen volume %s: %w", from, ErrNoSuchDisk)
	}
	if _, taken := h.st.Disks[to]; taken {
		return fmt.Errorf("copy disk: the host has seen volume %s already", to)
	}
	d := *src
	d.VolumeID, d.Online, d.Partitions = to, false, nil
	for _, p := range src.Partitions {
		pc := *p
		if p.Volume != nil {
			vc := *p.Volume
			vc.ID = newVolumeID()
			pc.Volume = &vc
		}
		d.Partitions = append(d.Partitions, &pc)
	}
	h.st.Disks[to] = &d
	return save(h.cfg.DataDir, h.st)
}
