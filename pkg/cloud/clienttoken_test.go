package cloud

import (
	"errors"
	"fmt"
	"testing"
)

func TestClientToken(t *testing.T) {
	long := string(make([]byte, 300))
	seen := map[string]string{}
	for _, name := range []string{"pvc-1", "pvc-10", "pvc-1\x001", "", long} {
		for n := range 4 {
			tok := clientToken(name, n)
			if len(tok) != 64 {
				t.Errorf("token %q has %d characters; EC2 takes at most 64", tok, len(tok))
			}
			if tok != clientToken(name, n) {
				t.Errorf("token of (%q, %d) is not stable", name, n)
			}
			key := fmt.Sprintf("(%q, %d)", name, n)
			if other, dup := seen[tok]; dup {
				t.Errorf("%s and %s share token %s", key, other, tok)
			}
			seen[tok] = key
		}
	}
}

// tokenTable plays EC2's side of ClientToken idempotency for the sequence
// logic alone: a token remembers the parameters and volume of its first
// use; a volume can be lost later (a KMS failure, an operator's delete).
type tokenTable struct {
	used    map[string]string // token → parameters
	volume  map[string]string // token → volume ID
	lost    map[string]bool   // volume ID → gone
	created int
}

func newTokenTable() *tokenTable {
	return &tokenTable{used: map[string]string{}, volume: map[string]string{}, lost: map[string]bool{}}
}

// create is one CreateVolume attempt with the outcome CreateVolume turns
// into errTokenSpent (mismatch, or a lost volume) or a volume ID.
func (tt *tokenTable) create(params string) func(int, string) (string, error) {
	return func(_ int, token string) (string, error) {
		if prev, ok := tt.used[token]; ok {
			if prev != params {
				return "", fmt.Errorf("IdempotentParameterMismatch: %w", errTokenSpent)
			}
			if id := tt.volume[token]; tt.lost[id] {
				return "", fmt.Errorf("volume %s is lost: %w", id, errTokenSpent)
			}
			return tt.volume[token], nil
		}
		tt.created++
		id := fmt.Sprintf("vol-%d", tt.created)
		tt.used[token], tt.volume[token] = params, id
		return id, nil
	}
}

func TestWithClientTokensAcrossRestarts(t *testing.T) {
	tests := []struct {
		name string
		// history runs before the checked calls: steps on the table.
		history func(tt *tokenTable)
		params  string
		// wantVolume is what every (restarted) call must return.
		wantVolume  string
		wantCreated int
	}{
		{
			name:        "fresh name: the first token makes the volume",
			history:     func(*tokenTable) {},
			params:      "10GiB",
			wantVolume:  "vol-1",
			wantCreated: 1,
		},
		{
			name: "first token burned with other parameters",
			history: func(tt *tokenTable) {
				_, _ = tt.create("5GiB")(0, clientToken("pvc", 0))
				tt.lost["vol-1"] = true
			},
			params:      "10GiB",
			wantVolume:  "vol-2",
			wantCreated: 2,
		},
		{
			name: "the first token's volume was lost",
			history: func(tt *tokenTable) {
				_, _ = tt.create("10GiB")(0, clientToken("pvc", 0))
				tt.lost["vol-1"] = true
			},
			params:      "10GiB",
			wantVolume:  "vol-2",
			wantCreated: 2,
		},
		{
			name: "two tokens spent in different ways",
			history: func(tt *tokenTable) {
				_, _ = tt.create("5GiB")(0, clientToken("pvc", 0))
				_, _ = tt.create("10GiB")(0, clientToken("pvc", 1))
				tt.lost["vol-2"] = true
			},
			params:      "10GiB",
			wantVolume:  "vol-3",
			wantCreated: 3,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tt := newTokenTable()
			tc.history(tt)
			// Each call stands for a new controller process: it knows
			// nothing but the name.
			for restart := range 3 {
				got, err := withClientTokens("pvc", tt.create(tc.params))
				if err != nil {
					t.Fatalf("call %d: %v", restart, err)
				}
				if got != tc.wantVolume {
					t.Fatalf("call %d returned %s, want %s", restart, got, tc.wantVolume)
				}
			}
			if tt.created != tc.wantCreated {
				t.Errorf("%d volumes created, want %d", tt.created, tc.wantCreated)
			}
		})
	}
}

func TestWithClientTokensGivesUp(t *testing.T) {
	calls := 0
	_, err := withClientTokens("pvc", func(int, string) (string, error) {
		calls++
		return "", fmt.Errorf("mismatch: %w", errTokenSpent)
	})
	if !errors.Is(err, ErrIdempotentParameterMismatch) {
		t.Errorf("err = %v, want ErrIdempotentParameterMismatch", err)
	}
	if calls != maxClientTokens {
		t.Errorf("%d attempts, want %d", calls, maxClientTokens)
	}
	other := errors.New("limit exceeded")
	if _, err := withClientTokens("pvc", func(int, string) (string, error) { return "", other }); !errors.Is(err, other) {
		t.Errorf("a failure other than a spent token must end the walk: %v", err)
	}
}
