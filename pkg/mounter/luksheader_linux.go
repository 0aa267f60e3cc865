//go:build linux

package mounter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// maxLUKSKeySlots is the most key slots a LUKS2 header can have.
const maxLUKSKeySlots = 32

// The key derivation functions cryptsetup knows; a header naming another
// is refused, since its cost cannot be judged.
var luksKDFs = []string{"pbkdf2", "argon2i", "argon2id"}

// parseLUKSDump reads luksDump's JSON metadata of a LUKS2 header (the
// LUKS2 on-disk format's JSON area): each key slot's key derivation and
// the data segment's offset. Names are matched exactly, as cryptsetup's
// JSON library matches them, and an object whose names repeat, exactly or
// but for case, is refused: a reader that matched them loosely (as
// encoding/json does, the last one winning) could be shown a cheap key
// slot while cryptsetup derives from a costly one.
func parseLUKSDump(out []byte) (luksHeader, error) {
	top, err := jsonObject(out, "the LUKS2 metadata")
	if err != nil {
		return luksHeader{}, err
	}
	slots, err := jsonObject(top["keyslots"], "the LUKS2 key slots")
	if err != nil {
		return luksHeader{}, err
	}
	if len(slots) > maxLUKSKeySlots {
		return luksHeader{}, fmt.Errorf("the LUKS2 header lists %d key slots, more than LUKS2's %d", len(slots), maxLUKSKeySlots)
	}
	var h luksHeader
	for n, raw := range slots {
		s, err := parseLUKSSlot(n, raw)
		if err != nil {
			return luksHeader{}, err
		}
		h.Slots = append(h.Slots, s)
	}
	sort.Slice(h.Slots, func(i, j int) bool { return h.Slots[i].Number < h.Slots[j].Number })
	segments, err := jsonObject(top["segments"], "the LUKS2 segments")
	if err != nil {
		return luksHeader{}, err
	}
	seg, err := jsonObject(segments["0"], "the LUKS2 segment 0")
	if err != nil {
		return luksHeader{}, fmt.Errorf("the LUKS2 header has no crypt segment 0: %w", err)
	}
	var typ, offset string
	if err := jsonField(seg, "type", &typ); err != nil || typ != "crypt" {
		return luksHeader{}, fmt.Errorf("the LUKS2 header's segment 0 is not a crypt segment (type %q)", typ)
	}
	if err := jsonField(seg, "offset", &offset); err != nil {
		return luksHeader{}, fmt.Errorf("the LUKS2 header's data offset: %w", err)
	}
	off, err := strconv.ParseInt(offset, 10, 64)
	if err != nil || off <= 0 {
		return luksHeader{}, fmt.Errorf("the LUKS2 header's data offset %q is not a positive byte count", offset)
	}
	h.DataOffset = off
	return h, nil
}

// parseLUKSSlot reads one key slot's key derivation.
func parseLUKSSlot(n string, raw json.RawMessage) (luksSlot, error) {
	s := luksSlot{Number: n}
	slot, err := jsonObject(raw, "LUKS2 key slot "+n)
	if err != nil {
		return s, err
	}
	kdf, err := jsonObject(slot["kdf"], "the key derivation of LUKS2 key slot "+n)
	if err != nil {
		return s, err
	}
	if err := jsonField(kdf, "type", &s.KDF); err != nil || !slices.Contains(luksKDFs, s.KDF) {
		return s, fmt.Errorf("LUKS2 key slot %s derives its key with %q, not one of %s: its cost cannot be judged", n, s.KDF, strings.Join(luksKDFs, ", "))
	}
	if s.KDF == "pbkdf2" {
		err = jsonField(kdf, "iterations", &s.Time)
	} else {
		err = errors.Join(jsonField(kdf, "time", &s.Time), jsonField(kdf, "memory", &s.MemoryKiB), jsonField(kdf, "cpus", &s.Threads))
	}
	if err != nil {
		return s, fmt.Errorf("LUKS2 key slot %s (%s): %w", n, s.KDF, err)
	}
	return s, nil
}

// jsonObject reads a JSON object's members by their exact names, refusing
// one whose names repeat, exactly or but for case. what names the object
// in errors; a missing object (nil) is one.
func jsonObject(raw json.RawMessage, what string) (map[string]json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("%s: missing", what)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%s: not a JSON object", what)
	}
	members := map[string]json.RawMessage{}
	names := map[string]string{} // lower case → as written
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if prev, seen := names[strings.ToLower(name)]; seen {
			return nil, fmt.Errorf("%s: the name %q appears twice (also as %q): refused, since readers may take either", what, name, prev)
		}
		names[strings.ToLower(name)] = name
		members[name] = v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, fmt.Errorf("%s: not a JSON object", what)
	}
	return members, nil
}

// jsonField decodes the member name of an object into dst.
func jsonField(members map[string]json.RawMessage, name string, dst any) error {
	raw, ok := members[name]
	if !ok {
		return fmt.Errorf("no %q", name)
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("%q: %w", name, err)
	}
	return nil
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
