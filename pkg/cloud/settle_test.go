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
	l.record("a", nil)
	if d := l.unsettled("a", false); d < 59*time.Minute {
		t.Fatalf("a key just sent settles in %v, want about the window", d)
	}
	l.record("b", sdkError("CreateSnapshot", 400, "InvalidVolume.NotFound", "no such volume"))
	if d := l.unsettled("b", false); d != 0 {
		t.Fatalf("a request EC2 refused cannot have made anything, yet the key is %v from settled", d)
	}

	l.record("c", sdkError("CreateSnapshot", 500, "InternalError", "boom"))
	if d := l.unsettled("c", false); d < 59*time.Minute {
		t.Fatalf("a request that failed with a server error may have been applied, yet the key settles in %v", d)
	}

	short := newSendLog(time.Millisecond)
	short.record("b", nil)
	time.Sleep(2 * time.Millisecond)
	if d := short.unsettled("b", true); d != 0 {
		t.Fatalf("after the window a key is settled, not %v away", d)
	}
	short.record("c", nil) // drops the old entries
	short.mu.Lock()
	_, kept := short.sent["b"]
	short.mu.Unlock()
	if kept {
		t.Error("an entry older than the window is still kept")
	}
}
