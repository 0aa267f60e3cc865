//go:build linux

package sanity

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"github.com/diskplane/diskplane/tests/sanity/ec2ids"
)

// gib is a binary gigabyte, the unit EBS sizes volumes in.
const gib int64 = 1 << 30

// accessTypes are the access types the whole suite runs for, each in a run
// of its own: every spec that creates, publishes or validates a volume does
// so with a mount capability in one run and a raw block one in the other.
var accessTypes = []string{"mount", "block"}

// TestSanity runs csi-sanity against Diskplane in all mode: the real
// controller over the real cloud layer and an in-process EC2 emulator, the
// real node service with the real Linux mounter over the emulator's loop
// devices. It needs root; CI runs it as root.
//
// Each access type gets a plugin and a cloud of its own. csi-sanity names
// volumes with one suffix per process, so the second run asks for the names
// of volumes the first one deleted; in one cloud, EC2's ClientTokens (which
// Diskplane derives from the name) would return those deleted volumes, and
// the cloud layer would wait for each to show up, as a volume EC2 has just
// created may not yet, before it moved on to a fresh token.
func TestSanity(t *testing.T) {
	plugins := map[string]*plugin{}
	for _, access := range accessTypes {
		p := startPlugin(t)
		plugins[access] = p
		cfg := testConfig(p.Endpoint, p.Dir, access)
		ginkgo.Describe(access+" access", func() { sanity.GinkgoTest(&cfg) })
	}
	var report types.Report
	ginkgo.ReportAfterSuite("Diskplane sanity summary", func(r types.Report) { report = r })
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Diskplane CSI sanity")

	for _, access := range accessTypes {
		t.Logf("%s access: %s", access, countSpecs(report, access))
	}
	checkSkips(t, report, accessTypes)
	for _, access := range accessTypes {
		checkNothingLeft(t, access, plugins[access])
	}
}

// testConfig is csi-sanity's default configuration (10 repeats for every
// idempotency spec) with everything Diskplane supports switched on, for a
// plugin at endpoint whose staging and target paths go below dir.
func testConfig(endpoint, dir, access string) sanity.TestConfig {
	cfg := sanity.NewTestConfig()
	cfg.Address = endpoint
	cfg.TargetPath = filepath.Join(dir, access+"-target")
	cfg.StagingPath = filepath.Join(dir, access+"-staging")
	cfg.TestVolumeAccessType = access
	// 8 GiB is the smallest gp3 volume that may have the 4,000 IOPS below
	// (500 IOPS per GiB); its image is sparse and ext4 formats it lazily.
	cfg.TestVolumeSize = 8 * gib
	cfg.TestVolumeExpandSize = 10 * gib
	cfg.TestVolumeParameters = map[string]string{"type": "gp3"}
	// A VolumeAttributesClass raising gp3's baseline (3,000 IOPS, 125 MiB/s).
	cfg.TestVolumeMutableParameters = map[string]string{"iops": "4000", "throughput": "250"}
	cfg.TestNodeVolumeAttachLimit = true
	cfg.IDGen = ec2ids.Generator{}
	return cfg
}

// specKey names a spec without the access type it ran for: its containers
// below the access type, and its own text.
func specKey(s types.SpecReport) string {
	return strings.Join(append(slices.Clone(s.ContainerHierarchyTexts[1:]), s.LeafNodeText), " ")
}

// specs returns the It specs that ran (or were skipped) for an access type.
func specs(report types.Report, access string) []types.SpecReport {
	var out []types.SpecReport
	for _, s := range report.SpecReports {
		if s.LeafNodeType == types.NodeTypeIt && len(s.ContainerHierarchyTexts) > 0 &&
			s.ContainerHierarchyTexts[0] == access+" access" {
			out = append(out, s)
		}
	}
	return out
}

// countSpecs summarises how the specs of one access type ended.
func countSpecs(report types.Report, access string) string {
	count := map[types.SpecState]int{}
	all := specs(report, access)
	for _, s := range all {
		count[s.State]++
	}
	failed := len(all) - count[types.SpecStatePassed] - count[types.SpecStateSkipped] - count[types.SpecStatePending]
	return fmt.Sprintf("%d specs: %d passed, %d failed, %d skipped, %d pending",
		len(all), count[types.SpecStatePassed], failed, count[types.SpecStateSkipped], count[types.SpecStatePending])
}

// filtered reports whether the run was narrowed to some specs, which then
// count as skipped too.
func filtered(c types.SuiteConfig) bool {
	return len(c.FocusStrings)+len(c.SkipStrings)+len(c.FocusFiles)+len(c.SkipFiles) > 0 ||
		c.LabelFilter != "" || c.SemVerFilter != ""
}

// checkSkips fails the test when a spec is skipped that README.md does not
// list, or a listed one ran: a capability Diskplane lost, or gained, must
// show here rather than quietly shrink or grow the suite. A run narrowed
// with -ginkgo.focus or -ginkgo.skip is not checked.
func checkSkips(t *testing.T, report types.Report, accesses []string) {
	t.Helper()
	if filtered(report.SuiteConfig) {
		t.Log("specs were filtered (-ginkgo.focus, -ginkgo.skip …): not checking which were skipped")
		return
	}
	for _, access := range accesses {
		var skipped []string
		for _, s := range specs(report, access) {
			if s.State == types.SpecStateSkipped || s.State == types.SpecStatePending {
				skipped = append(skipped, specKey(s))
				if _, ok := expectedSkips[specKey(s)]; !ok {
					t.Errorf("%s access: %q was skipped (%s), which README.md does not list", access, specKey(s), s.Failure.Message)
				}
			}
		}
		for spec := range expectedSkips {
			if !slices.Contains(skipped, spec) {
				t.Errorf("%s access: %q ran, but README.md lists it as skipped", access, spec)
			}
		}
	}
}

// checkNothingLeft fails the test when the suite left a volume, a snapshot
// or a device link behind: every spec deletes what it made, so a leftover
// means DeleteVolume or DeleteSnapshot answered success without deleting.
func checkNothingLeft(t *testing.T, access string, p *plugin) {
	t.Helper()
	for _, v := range p.Env.Cloud().Volumes() {
		if !v.Root {
			t.Errorf("%s access: volume %s (%s) is left in the cloud", access, v.ID, v.State)
		}
	}
	for _, s := range p.Env.Cloud().Snapshots() {
		t.Errorf("%s access: snapshot %s (%s) is left in the cloud", access, s.ID, s.State)
	}
	links, err := filepath.Glob(filepath.Join(p.Env.LinkDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		t.Errorf("%s access: device link %s is left on the node", access, l)
	}
}
