package testutil

import (
	"bytes"
	"flag"
	"os"
	"strconv"
	"sync"
	"testing"

	"k8s.io/klog/v2"
)

// LogBuffer holds what klog wrote during a test. klog writes from several
// goroutines (and flushes from its own), so it is guarded.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends klog's output.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String flushes klog and returns everything written so far.
func (l *LogBuffer) String() string {
	klog.Flush()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// CaptureKlog sends klog's output, down to verbosity v, into the returned
// buffer until the test ends, then gives klog back its defaults (stderr,
// V(0)). Tests check with it what is logged and what never is (a secret),
// and how often. Every line lands in the buffer once, whatever its
// severity. klog is process-wide: a test that captures must not run in
// parallel with other tests that log.
func CaptureKlog(t testing.TB, v int) *LogBuffer {
	t.Helper()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for name, value := range map[string]string{"v": strconv.Itoa(v), "logtostderr": "false", "alsologtostderr": "false"} {
		if err := fs.Set(name, value); err != nil {
			t.Fatal(err)
		}
	}
	buf := &LogBuffer{}
	// The INFO output gets every severity's lines; the others stay unset,
	// so an error is not written three times.
	klog.SetOutputBySeverity("INFO", buf)
	t.Cleanup(func() {
		klog.Flush()
		_ = fs.Set("v", "0")
		_ = fs.Set("logtostderr", "true")
		klog.SetOutput(os.Stderr)
	})
	return buf
}
