package cloud

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"
)

// tokensPerCall bounds how many ClientTokens one CreateVolume call walks
// past (each costs one CreateVolume request). A walk that reaches the bound
// is not a failure: the call asks to be retried, and the next one goes on
// from where this one stopped.
const tokensPerCall = 10

// clientToken returns the n-th EC2 ClientToken of a volume name. The tokens
// depend on nothing but the name and n, so a restarted controller, or a
// second replica after a leader change, derives the same sequence and finds
// the volume an earlier process created instead of making another. The hash
// input is the name's length, the name and n, an encoding no two (name, n)
// pairs share whatever bytes a name holds; a SHA-256 in hex is 64
// characters, exactly EC2's limit, whatever the name's length.
//
// CreateVolume walks the sequence from 0: EC2 answers a token it saw with
// the same parameters with the volume it made, so the first token that is
// not spent is either new or the one an earlier attempt used. A token is
// spent, and the walk moves past it, only when it is known to be dead: the
// volume it made failed (this process saw it), or EC2 refuses the token
// (IdempotentParameterMismatch: its volume is gone, or it was made with
// other parameters) while no live volume carries the name in a lookup that
// can be trusted (see sendLog). So a parameter change between attempts (a
// tag, a zone after a reschedule) never makes a second volume.
func clientToken(name string, n int) string {
	in := binary.AppendUvarint(nil, uint64(len(name)))
	in = append(in, name...)
	in = binary.AppendUvarint(in, uint64(n))
	sum := sha256.Sum256(in)
	return hex.EncodeToString(sum[:])
}

// tokenHintTTL is how long a process remembers the spent tokens of a name
// whose volume it has not made (a claim deleted meanwhile stops asking).
const tokenHintTTL = 24 * time.Hour

// tokenHints remembers, per volume name, the first token of its sequence
// not known to be spent, so a retry in the same process does not walk the
// dead tokens again (and can move on right after a failed volume). It is a
// shortcut only: a new process starts from token 0 and reaches the same
// place, since every token it passes is dead for it too.
type tokenHints struct {
	mu    sync.Mutex
	first map[string]tokenHint
}

type tokenHint struct {
	n  int
	at time.Time
}

func newTokenHints() *tokenHints {
	return &tokenHints{first: map[string]tokenHint{}}
}

// next is the token a walk for name starts at.
func (h *tokenHints) next(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.first[name].n
}

// spent records that token n of name, and every one before it, is dead.
func (h *tokenHints) spent(name string, n int) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, v := range h.first {
		if now.Sub(v.at) >= tokenHintTTL {
			delete(h.first, k)
		}
	}
	if n+1 > h.first[name].n {
		h.first[name] = tokenHint{n: n + 1, at: now}
	}
}

// done forgets name once its volume is made.
func (h *tokenHints) done(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.first, name)
}
