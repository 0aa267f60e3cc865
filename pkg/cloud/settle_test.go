package cloud

import (
	"testing"
	"time"
)

func TestSendLog(t *testing.T) {
	l := newSendLog(time.Hour)
	if d := l.unsettled("a", false); d != 0 {
		t.Fatalf("a key never sent is settled, not %v away", d)
	}
	if d := l.unsettled("a", true); d < 59*time.Minute {
		t.Fatalf("counting earlier processes, a key is unsettled for the window after the start, not %v", d)
	}
	l.record("a", time.Now(), nil)
	if d := l.unsettled("a", false); d < 59*time.Minute {
		t.Fatalf("a key just sent settles in %v, want about the window", d)
	}
	l.forget("a")
	if d := l.unsettled("a", false); d != 0 {
		t.Fatalf("a forgotten key is %v from settled", d)
	}

	short := newSendLog(time.Millisecond)
	short.record("b", time.Now(), nil)
	time.Sleep(2 * time.Millisecond)
	if d := short.unsettled("b", true); d != 0 {
		t.Fatalf("after the window a key is settled, not %v away", d)
	}
	short.record("c", time.Now(), nil) // drops the old entries
	short.mu.Lock()
	_, kept := short.sent["b"]
	short.mu.Unlock()
	if kept {
		t.Error("an entry older than the window is still kept")
	}
}
