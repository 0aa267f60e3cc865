package sanity

import (
	"flag"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

// TestMain adds klog's flags, so the plugin's own log can be turned up when
// a spec fails: go test ./tests/sanity -args -v=4 logs every request.
func TestMain(m *testing.M) {
	klog.InitFlags(flag.CommandLine)
	os.Exit(m.Run())
}
