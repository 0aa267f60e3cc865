package crash

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// interruption is where and how a run is interrupted; the zero value runs
// it through.
type interruption struct {
	// At is the step, counted from 1; 0 interrupts nothing.
	At int
	// Mode is fail, kill or kill-after.
	Mode string
}

// Interruption modes.
const (
	modeFail      = "fail"
	modeKill      = "kill"
	modeKillAfter = "kill-after"
)

// Recovery paths (doc.go).
const (
	pathRetry    = "retry"
	pathRestart  = "restart"
	pathReboot   = "reboot"
	pathSnapshot = "snapshot"
)

// column is one interruption and one recovery from it.
type column struct {
	mode, path string
}

func (c column) String() string { return c.mode + " → " + c.path }

// columns are the table's columns in the order printed.
var columns = []column{
	{modeFail, pathRetry}, {modeFail, pathRestart}, {modeFail, pathReboot}, {modeFail, pathSnapshot},
	{modeKill, pathRestart}, {modeKill, pathReboot}, {modeKill, pathSnapshot},
	{modeKillAfter, pathRestart}, {modeKillAfter, pathReboot}, {modeKillAfter, pathSnapshot},
}

// run is one interrupted run of an operation: interrupted at step at in
// mode, recovered along live (retry or restart, from the node as the
// interruption left it; "" for none) and along each of copies (reboot,
// snapshot: from the volume's bytes at that moment).
type run struct {
	at     int
	mode   string
	live   string
	copies []string
}

// profile is DISKPLANE_CRASH_PROFILE: "full" runs every column at every
// step; anything else (CI) runs one column at each step, taking the four
// columns of ciColumns in turn, and kills the plugin once more right after
// the last step.
func profile() string {
	if os.Getenv("DISKPLANE_CRASH_PROFILE") == "full" {
		return "full"
	}
	return "ci"
}

// ciColumns are the columns the CI profile takes in turn, step by step.
var ciColumns = []column{{modeFail, pathRetry}, {modeKill, pathRestart}, {modeFail, pathReboot}, {modeKill, pathSnapshot}}

// runsAt are the runs of step at (of steps) in the profile.
func runsAt(prof string, at, steps int) []run {
	if prof == "full" {
		return []run{
			{at, modeFail, pathRetry, []string{pathReboot, pathSnapshot}},
			{at, modeFail, pathRestart, nil},
			{at, modeKill, pathRestart, []string{pathReboot, pathSnapshot}},
			{at, modeKillAfter, pathRestart, []string{pathReboot, pathSnapshot}},
		}
	}
	cs := []column{ciColumns[(at-1)%len(ciColumns)]}
	if at == steps && at < len(ciColumns) {
		cs = append(cs, ciColumns[at:]...) // an operation of few steps still sees them all
	}
	var runs []run
	for _, c := range cs {
		r := run{at: at, mode: c.mode, live: c.path}
		if c.path == pathReboot || c.path == pathSnapshot {
			r.live, r.copies = "", []string{c.path}
		}
		runs = append(runs, r)
	}
	if at == steps {
		runs = append(runs, run{at, modeKillAfter, pathRestart, nil})
	}
	return runs
}

// outcome is one cell: "" not run, "ok", refusedClearDisk, or what went
// wrong.
type outcome string

const (
	ok outcome = "ok"
	// refusedClearDisk: the recovery answered a clear error naming the one
	// action that fixes it, Clear-Disk (a Windows disk copied while its new
	// partition was not yet formatted; see pkg/mounter's partitionedDir).
	refusedClearDisk outcome = "refused, naming Clear-Disk"
)

// table is the harness's report of one operation.
type table struct {
	operation string
	steps     []string
	cells     map[int]map[column]outcome
}

func newTable(operation string, steps []string) *table {
	return &table{operation: operation, steps: steps, cells: map[int]map[column]outcome{}}
}

func (tb *table) set(at int, c column, o outcome) {
	if tb.cells[at] == nil {
		tb.cells[at] = map[column]outcome{}
	}
	tb.cells[at][c] = o
}

// failures lists every cell that is neither ok nor unrun.
func (tb *table) failures() []string {
	var out []string
	for at := 1; at <= len(tb.steps); at++ {
		for _, c := range columns {
			if o := tb.cells[at][c]; o != "" && o != ok && o != refusedClearDisk {
				out = append(out, fmt.Sprintf("%s, step %d (%s), %s: %s", tb.operation, at, tb.steps[at-1], c, o))
			}
		}
	}
	return out
}

// markdown renders the table: a row per step, a column per interruption
// and recovery that ran anywhere in it.
func (tb *table) markdown() string {
	var used []column
	for _, c := range columns {
		for at := range tb.cells {
			if tb.cells[at][c] != "" {
				used = append(used, c)
				break
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#### %s\n\n| step | |", tb.operation)
	for _, c := range used {
		fmt.Fprintf(&b, " %s |", c)
	}
	b.WriteString("\n|---|---|")
	for range used {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for at, step := range tb.steps {
		fmt.Fprintf(&b, "| %d | `%s` |", at+1, step)
		for _, c := range used {
			o := tb.cells[at+1][c]
			switch o {
			case "":
				o = "·"
			case ok:
			case refusedClearDisk:
				o = "refused¹"
			default:
				o = "**FAIL**"
			}
			fmt.Fprintf(&b, " %s |", o)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// report prints the tables and writes them, as markdown, to
// $DISKPLANE_CRASH_REPORT when it is set; then fails the test for every
// cell that failed.
func report(t *testing.T, os_ string, tables []*table) {
	var b strings.Builder
	cells, failed := 0, 0
	for _, tb := range tables {
		b.WriteString(tb.markdown())
		b.WriteString("\n")
		for _, row := range tb.cells {
			cells += len(row)
		}
		failed += len(tb.failures())
	}
	b.WriteString("· not run in this profile; refused¹: a clear error naming the one action that fixes it (Clear-Disk)\n")
	summary := fmt.Sprintf("crash-point table (%s, %s profile): %d operations, %d cells, %d failed", os_, profile(), len(tables), cells, failed)
	t.Logf("%s:\n%s", summary, b.String())
	if dir := os.Getenv("DISKPLANE_CRASH_REPORT"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Error(err)
		} else if err := os.WriteFile(filepath.Join(dir, "crash-"+os_+".md"), []byte(summary+"\n\n"+b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	for _, tb := range tables {
		for _, f := range tb.failures() {
			t.Error(f)
		}
	}
}
