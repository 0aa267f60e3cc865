//go:build linux

package mounter

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// realDump is cryptsetup 2.6.1's luksDump --dump-json-metadata of a LUKS2
// header formatted with Argon2id over 64 MiB, 4 passes, 2 threads, its data
// at 16 MiB.
func realDump(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/luksdump-argon2id-2.6.1.json")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseLUKSDump(t *testing.T) {
	h, err := parseLUKSDump([]byte(realDump(t)))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Slots) != 1 || h.Slots[0] != (luksSlot{Number: "0", KDF: "argon2id", MemoryKiB: 65536, Time: 4, Threads: 2}) || h.DataOffset != 16<<20 {
		t.Fatalf("parsed %+v", h)
	}
	if err := h.checkCost("vol-1", 65536); err != nil {
		t.Fatalf("a slot within the limit: %v", err)
	}
	if err := h.checkCost("vol-1", 65535); !errors.Is(err, ErrLUKSTooCostly) {
		t.Fatalf("a slot over the limit: %v", err)
	}
}

// A cheap slot shown only to a loose reader: cryptsetup reads names exactly
// and would derive from the 4 GiB Argon2id slot, encoding/json took the last
// of the names that match but for case.
const costly = `{"type":"argon2id","time":4,"memory":4194304,"cpus":4}`
const cheap = `{"type":"pbkdf2","iterations":1000}`

func TestParseLUKSDumpRefusesWhatReadersMayReadTwoWays(t *testing.T) {
	segments := `"segments":{"0":{"type":"crypt","offset":"16777216"}}`
	for _, tc := range []struct {
		name, dump, want string
	}{
		{"key slots twice, but for case", `{"keyslots":{"0":{"kdf":` + costly + `}},"KEYSLOTS":{"0":{"kdf":` + cheap + `}},` + segments + `}`, `"KEYSLOTS" appears twice`},
		{"a slot's kdf twice, but for case", `{"keyslots":{"0":{"kdf":` + costly + `,"KDF":` + cheap + `}},` + segments + `}`, `"KDF" appears twice`},
		{"a slot twice", `{"keyslots":{"0":{"kdf":` + costly + `},"0":{"kdf":` + cheap + `}},` + segments + `}`, `"0" appears twice`},
		{"a kdf's memory twice, but for case", `{"keyslots":{"0":{"kdf":{"type":"argon2id","time":4,"memory":4194304,"Memory":1024,"cpus":4}}},` + segments + `}`, `"Memory" appears twice`},
		{"an unknown kdf", `{"keyslots":{"0":{"kdf":{"type":"scrypt","memory":1}}},` + segments + `}`, `"scrypt"`},
		{"a kdf type in capitals", `{"keyslots":{"0":{"kdf":{"type":"Argon2id","time":4,"memory":1024,"cpus":4}}},` + segments + `}`, `"Argon2id"`},
		{"argon2 without its memory", `{"keyslots":{"0":{"kdf":{"type":"argon2id","time":4,"cpus":4}}},` + segments + `}`, `no "memory"`},
		{"memory that is not a whole number", `{"keyslots":{"0":{"kdf":{"type":"argon2id","time":4,"memory":1e12,"cpus":4}}},` + segments + `}`, `"memory"`},
		{"a slot's kdf only in capitals", `{"keyslots":{"0":{"KDF":` + cheap + `}},` + segments + `}`, "key derivation of LUKS2 key slot 0: missing"},
		{"no key slots", `{` + segments + `}`, "key slots: missing"},
		{"thirty-three key slots", `{"keyslots":{` + manySlots(33) + `},` + segments + `}`, "33 key slots"},
		{"no crypt segment", `{"keyslots":{},"segments":{"0":{"type":"linear","offset":"16777216"}}}`, "not a crypt segment"},
		{"a negative offset", `{"keyslots":{},"segments":{"0":{"type":"crypt","offset":"-1"}}}`, "not a positive byte count"},
		{"not JSON", `Keyslots: 0: luks2`, "not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := parseLUKSDump([]byte(tc.dump))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parsed %+v, %v; want an error with %s", h, err, tc.want)
			}
		})
	}
}

// manySlots is n PBKDF2 key slots' entries.
func manySlots(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + strings.Repeat("1", i+1) + `":{"kdf":` + cheap + `}`)
	}
	return b.String()
}
