package cloud

import (
	"fmt"
	"os"
	"testing"
	"time"
)

func TestExploreWaves(t *testing.T) {
	if os.Getenv("EXPLORE") == "" {
		t.Skip()
	}
	fixed := []simChange{{transitionCreate, 2 * time.Second, 2 * time.Second}, {transitionAttach, 2 * time.Second, 2 * time.Second}, {transitionDetach, 2 * time.Second, 2 * time.Second}}
	for seed := uint64(1); seed <= 3; seed++ {
		r := simulateSharedWaits(Config{}, fixed, 500, 100, seed)
		line := fmt.Sprintf("seed %d calls %.2f:", seed, r.calls)
		for _, ch := range fixed {
			w := r.waited[ch.kind]
			line += fmt.Sprintf(" %s", ch.kind)
			for i := 0; i+100 <= len(w); i += 100 {
				line += fmt.Sprintf(" %.3f", pct(w[i:i+100], 50).Seconds())
			}
			line += fmt.Sprintf(" [p50 %.3f]", pct(w, 50).Seconds())
		}
		t.Log(line)
	}
}
