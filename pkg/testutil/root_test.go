package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRequireKernelFeatureRecordsSkips: the kernel-only run of the node VM
// (hack/vm/test.sh) runs there exactly the tests named in the file, so a
// skip must name its top-level test once, and a test that ran must not.
func TestRequireKernelFeatureRecordsSkips(t *testing.T) {
	cases := []struct {
		name string
		has  []bool // one subtest per entry, calling RequireKernelFeature with it
		want string
	}{
		{name: "nothing missing", has: []bool{true, true}, want: ""},
		{name: "one missing", has: []bool{true, false}, want: "TestRequireKernelFeatureRecordsSkips\n"},
		{name: "each subtest missing", has: []bool{false, false}, want: "TestRequireKernelFeatureRecordsSkips\nTestRequireKernelFeatureRecordsSkips\n"},
	}
	for _, tc := range cases {
		file := filepath.Join(t.TempDir(), "skips")
		t.Setenv(KernelSkipsEnv, file)
		t.Setenv(RequireKernelEnv, "")
		t.Run(tc.name, func(t *testing.T) {
			for i, has := range tc.has {
				t.Run(string(rune('a'+i)), func(t *testing.T) {
					RequireKernelFeature(t, has, "a feature this test pretends to lack")
				})
			}
		})
		got, err := os.ReadFile(file)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s: recorded %q, want %q", tc.name, got, tc.want)
		}
	}
}
