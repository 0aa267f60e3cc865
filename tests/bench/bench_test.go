//go:build bench

package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

var (
	profile  = flag.String("bench.profile", "full", "full (make bench) or ci (a reduced run that prints the same rows)")
	only     = flag.String("bench.only", "", "run only the sections whose names (P1 … P6) this regular expression matches")
	outDir   = flag.String("bench.out", "", "where the raw data goes (default _output/bench/<start time>)")
	latency  = flag.String("bench.latency", "", "the emulator's latency profile for the lifecycle runs that name none (instant, fixed, ebs, slow; default fixed)")
	runNames = flag.String("bench.runs", "", "run only the lifecycle runs (P1/P2) whose names this regular expression matches")
	apart    = flag.Bool("bench.apart", false, "run each lifecycle run alone, through Diskplane and then through the upstream driver, instead of both at once (each against its own backend) and the runs of ten at a time two at once")
)

// upstreamEnv names the environment variable that points at a binary of
// the upstream AWS EBS CSI driver (kubernetes-sigs/aws-ebs-csi-driver, built
// by you from its repository) to compare with in the same run.
const upstreamEnv = "UPSTREAM_EBS_CSI_DRIVER"

// row is one line of the report: a figure, its floor (the least it can
// be), and, when compared, another driver's figure.
type row struct {
	Section  string  `json:"section"`
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Upstream float64 `json:"upstream,omitempty"`
	Floor    float64 `json:"floor"`
	Unit     string  `json:"unit"`
	Note     string  `json:"note,omitempty"`
}

// report collects the rows of a run and the raw data behind them.
type report struct {
	dir      string
	started  time.Time
	rows     []row
	upstream bool
	raw      map[string]any
}

func (r *report) add(section, name string, value, floor float64, unit, note string) {
	r.rows = append(r.rows, row{Section: section, Name: name, Value: value, Floor: floor, Unit: unit, Note: note})
}

// format prints a value in its unit.
func format(v float64, unit string) string {
	switch unit {
	case "s":
		return fmt.Sprintf("%.2f s", v)
	case "":
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.0f %s", v, unit)
	}
}

// print writes the table: each figure, its floor and the ratio of the two,
// and the other driver's figure when there is one.
func (r *report) print(t *testing.T) {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	header := "section\tfigure\tDiskplane\tfloor\tratio"
	if r.upstream {
		header += "\tupstream"
	}
	fmt.Fprintln(w, header+"\tnote")
	for _, x := range r.rows {
		floor, ratio := "", ""
		if x.Floor > 0 {
			floor, ratio = format(x.Floor, x.Unit), fmt.Sprintf("%.2f", x.Value/x.Floor)
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", x.Section, x.Name, format(x.Value, x.Unit), floor, ratio)
		if r.upstream {
			up := ""
			if x.Upstream != 0 {
				up = format(x.Upstream, x.Unit)
			}
			line += "\t" + up
		}
		fmt.Fprintln(w, line+"\t"+x.Note)
	}
	_ = w.Flush()
	fmt.Printf("\nDiskplane benchmark, profile %s, %s, took %s; raw data in %s\n\n%s\n",
		*profile, r.started.UTC().Format(time.RFC3339), time.Since(r.started).Round(time.Second), r.dir, b.String())
	data, err := json.MarshalIndent(map[string]any{"profile": *profile, "started": r.started, "rows": r.rows, "raw": r.raw}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "results.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "table.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBench runs the profile's sections and prints one table.
func TestBench(t *testing.T) {
	if *profile != "full" && *profile != "ci" {
		t.Fatalf("-bench.profile=%s: want full or ci", *profile)
	}
	r := &report{started: time.Now(), raw: map[string]any{}, dir: *outDir}
	if r.dir == "" {
		r.dir = filepath.Join("..", "..", "_output", "bench", r.started.UTC().Format("20060102T150405Z"))
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if abs, err := filepath.Abs(r.dir); err == nil {
		r.dir = abs
	}
	t.Cleanup(func() { r.print(t) })
	sections := []struct {
		name string
		run  func(*testing.T, *report)
	}{
		{"P1 P2 lifecycles", benchLifecycles},
		{"P3 cluster", benchCluster},
		{"P4 P5 node", benchNode},
		{"P6 list", benchList},
	}
	pick, err := regexp.Compile(*only)
	if err != nil {
		t.Fatalf("-bench.only: %v", err)
	}
	for _, s := range sections {
		if pick.MatchString(s.name) {
			s.run(t, r)
		}
	}
}

// benchCluster reports P3 from the results make bench's cluster step left.
func benchCluster(t *testing.T, r *report) {
	var p ProvisionResult
	if !r.readStep(t, "p3.json", &p, "P3 was not run: make bench runs it in the local cluster first (tests/e2e TestProvisionToRunning)") {
		return
	}
	var parts []string
	for _, k := range sortedKeys(p.FloorParts) {
		parts = append(parts, fmt.Sprintf("%s %.2f s", k, p.FloorParts[k].Seconds()))
	}
	section := fmt.Sprintf("P3 %d claims with pods, local cluster", p.Pods)
	note := "floor: " + strings.Join(parts, " + ")
	if p.Note != "" {
		note += "; " + p.Note
	}
	r.add(section, "claim to pod Running p50", percentile(p.ToRunning, 50).Seconds(), p.Floor.Seconds(), "s", note)
	r.add(section, "claim to pod Running p99", percentile(p.ToRunning, 99).Seconds(), p.Floor.Seconds(), "s", "")
	r.raw["provisionToRunning"] = p

	var s SnapshotAfterStart
	if !r.readStep(t, "p3-snapshot.json", &s, "P3's snapshot after a controller start was not run (tests/e2e TestSnapshotAfterControllerRestart)") {
		return
	}
	r.add(section, "first snapshot after a controller start, to ready", s.ToReady.Seconds(), s.Floor.Seconds(), "s",
		fmt.Sprintf("floor: the snapshot's own latency; EC2 asked %.1f s after the VolumeSnapshot; aim ≤ floor + 10 s", s.ToAsked.Seconds()))
	r.raw["snapshotAfterStart"] = s
}

// readStep reads into v the JSON results file that a step of make bench run
// before this test (in the cluster, in the node VM) left in the run's
// directory. When the step did not run it logs why not and returns false.
func (r *report) readStep(t *testing.T, file string, v any, notRun string) bool {
	data, err := os.ReadFile(filepath.Join(r.dir, file))
	if os.IsNotExist(err) {
		t.Log(notRun)
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return true
}
