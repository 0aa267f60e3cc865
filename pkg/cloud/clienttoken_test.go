package cloud

import (
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

func TestTokenHints(t *testing.T) {
	h := newTokenHints()
	if n := h.next("pvc"); n != 0 {
		t.Fatalf("a new name starts at %d", n)
	}
	h.spent("pvc", 2)
	h.spent("pvc", 0) // an older token changes nothing
	if n := h.next("pvc"); n != 3 {
		t.Fatalf("after token 2 is spent the walk starts at %d, want 3", n)
	}
	if n := h.next("other"); n != 0 {
		t.Fatalf("another name starts at %d", n)
	}
	h.done("pvc")
	if n := h.next("pvc"); n != 0 {
		t.Fatalf("a made volume's name starts at %d again", n)
	}
}
