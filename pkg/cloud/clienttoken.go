package cloud

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// maxClientTokens bounds how far CreateVolume walks the token sequence of
// one volume name. Each step costs one CreateVolume call and is taken only
// when EC2 refuses a token or the volume it made is lost, so the bound is
// reached only when something is persistently wrong (say, a KMS key that
// makes every new volume fail).
const maxClientTokens = 10

// errTokenSpent means a ClientToken can no longer give a usable volume:
// EC2 answered IdempotentParameterMismatch (the token was used with other
// parameters, or for a volume that is gone), or the volume it returns is
// lost. CreateVolume then moves to the next token of the sequence.
var errTokenSpent = errors.New("client token spent")

// clientToken returns the n-th EC2 ClientToken of a volume name. The tokens
// depend on nothing but the name and n, so a restarted controller, or a
// second replica after a leader change, derives the same sequence and finds
// the volume an earlier process created instead of making another. The hash
// input is the name's length, the name and n, an encoding no two (name, n)
// pairs share whatever bytes a name holds; a SHA-256 in hex is 64
// characters, exactly EC2's limit, whatever the name's length.
func clientToken(name string, n int) string {
	in := binary.AppendUvarint(nil, uint64(len(name)))
	in = append(in, name...)
	in = binary.AppendUvarint(in, uint64(n))
	sum := sha256.Sum256(in)
	return hex.EncodeToString(sum[:])
}

// withClientTokens calls create with the tokens of name in order, 0, 1, 2 …,
// moving on while create reports errTokenSpent, and returns the first other
// outcome. Walking the sequence from the start on every call (rather than
// remembering where the last call stopped) is what makes a restarted process
// land on the same token: spent tokens are refused again in the same order,
// and the first good one returns the volume it already made.
func withClientTokens[T any](name string, create func(n int, token string) (T, error)) (T, error) {
	var lastSpent error
	for n := range maxClientTokens {
		v, err := create(n, clientToken(name, n))
		if !errors.Is(err, errTokenSpent) {
			return v, err
		}
		lastSpent = err
	}
	var zero T
	return zero, fmt.Errorf("volume %q: all %d client tokens are spent (the last: %v): %w",
		name, maxClientTokens, lastSpent, ErrIdempotentParameterMismatch)
}
