//go:build linux

package mounter

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// luksDataOffsetSectors is where the data of the LUKS2 headers Diskplane
// writes begins, in 512-byte sectors: 16 MiB, LUKS2's default, pinned
// (luksFormat --offset) so that the blank test before formatting can read
// where the mapping's first probe window will lie.
const (
	luksDataOffsetSectors = 32768
	luksDataOffset        = luksDataOffsetSectors * 512
)

// luksHeader is what Diskplane reads of a LUKS2 header before it derives a
// key from it: the cost of every key slot, and where the data lies.
type luksHeader struct {
	// Slots are the active key slots, by number.
	Slots []luksSlot
	// DataOffset is where the encrypted data begins on the device, in bytes.
	DataOffset int64
}

// luksSlot is one key slot's key derivation.
type luksSlot struct {
	Number string
	// KDF is pbkdf2, argon2i or argon2id.
	KDF string
	// MemoryKiB is Argon2's memory cost (0 for PBKDF2).
	MemoryKiB int64
	// Time is Argon2's passes, or PBKDF2's iterations.
	Time int64
	// Threads is Argon2's parallelism.
	Threads int
}

// luksDumpJSON is the part of cryptsetup luksDump --dump-json-metadata that
// luksHeader reads (the LUKS2 on-disk format's JSON area).
type luksDumpJSON struct {
	Keyslots map[string]struct {
		KDF struct {
			Type       string `json:"type"`
			Time       int64  `json:"time"`
			Memory     int64  `json:"memory"`
			CPUs       int    `json:"cpus"`
			Iterations int64  `json:"iterations"`
		} `json:"kdf"`
	} `json:"keyslots"`
	Segments map[string]struct {
		Type   string `json:"type"`
		Offset string `json:"offset"`
	} `json:"segments"`
}

// parseLUKSDump reads luksDump's JSON metadata of a LUKS2 header.
func parseLUKSDump(out []byte) (luksHeader, error) {
	var dump luksDumpJSON
	if err := json.Unmarshal(out, &dump); err != nil {
		return luksHeader{}, fmt.Errorf("read the LUKS2 metadata: %w", err)
	}
	var h luksHeader
	for n, k := range dump.Keyslots {
		s := luksSlot{Number: n, KDF: k.KDF.Type, MemoryKiB: k.KDF.Memory, Time: k.KDF.Time, Threads: k.KDF.CPUs}
		if s.KDF == "pbkdf2" {
			s.Time = k.KDF.Iterations
		}
		h.Slots = append(h.Slots, s)
	}
	sort.Slice(h.Slots, func(i, j int) bool { return h.Slots[i].Number < h.Slots[j].Number })
	seg, ok := dump.Segments["0"]
	if !ok || seg.Type != "crypt" {
		return luksHeader{}, fmt.Errorf("the LUKS2 header has no crypt segment 0 (segments %v)", dump.Segments)
	}
	off, err := strconv.ParseInt(seg.Offset, 10, 64)
	if err != nil || off <= 0 {
		return luksHeader{}, fmt.Errorf("the LUKS2 header's data offset %q is not a positive byte count", seg.Offset)
	}
	h.DataOffset = off
	return h, nil
}

// checkCost refuses a header any of whose key slots would take more memory
// to derive a key from than maxMemoryKiB. cryptsetup tries every active key
// slot in turn until one takes the key, so each one's cost must be
// bearable: an Argon2 slot of 4 GiB, written on a large machine or on
// purpose, would have the node plugin's container killed for its memory on
// every retry of the kubelet. Time is bounded by the call's deadline
// (cryptsetup is killed with it); memory is not.
func (h luksHeader) checkCost(volumeID string, maxMemoryKiB int) error {
	for _, s := range h.Slots {
		if strings.HasPrefix(s.KDF, "argon2") && s.MemoryKiB > int64(maxMemoryKiB) {
			return fmt.Errorf("%w: key slot %s of volume %s derives its key with %s over %d KiB of memory, more than this node's "+
				"--luks-max-pbkdf-memory (%d KiB); nothing was opened. Either raise --luks-max-pbkdf-memory together with the node "+
				"plugin's memory limit, or replace the key slot with a cheaper one where the volume can be opened "+
				"(cryptsetup luksConvertKey --key-slot %s --pbkdf-memory %d)",
				ErrLUKSTooCostly, s.Number, volumeID, s.KDF, s.MemoryKiB, maxMemoryKiB, s.Number, maxMemoryKiB)
		}
	}
	return nil
}

// readLUKSHeader reads a LUKS2 header's metadata with cryptsetup luksDump,
// which derives nothing. A LUKS1 header (no JSON metadata; its key slots
// are PBKDF2, which costs no memory) reads as a header with no slot costs
// and no data offset: Diskplane never wrote it, so it is never prepared.
func (m *linuxMounter) readLUKSHeader(ctx context.Context, volumeID, device, version string) (luksHeader, error) {
	if version == "1" {
		return luksHeader{}, nil
	}
	_, out, errOut, err := m.runCryptsetup(ctx, nil, "luksDump", "--dump-json-metadata", device)
	if err != nil {
		return luksHeader{}, cryptsetupError(fmt.Sprintf("read the LUKS header of volume %s (%s)", volumeID, device), strings.TrimSpace(errOut), err)
	}
	h, err := parseLUKSDump([]byte(out))
	if err != nil {
		return luksHeader{}, fmt.Errorf("volume %s (%s): %w", volumeID, device, err)
	}
	return h, nil
}
