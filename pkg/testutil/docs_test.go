package testutil

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// errorRecorder collects what a check reports instead of failing the test.
type errorRecorder struct {
	testing.TB
	errors []string
}

func (r *errorRecorder) Helper() {}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// listValue is a repeatable flag, as the binaries have them.
type listValue []string

func (l *listValue) String() string     { return fmt.Sprint([]string(*l)) }
func (l *listValue) Set(v string) error { *l = append(*l, v); return nil }

func testFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	fs.String("name", "x|y", "a name")
	fs.String("empty", "", "nothing by default")
	fs.Bool("on", true, "on by default")
	fs.Bool("off", false, "off by default")
	fs.Int("count", 0, "how many")
	fs.Duration("wait", 2*time.Second, "how long")
	fs.Var(&listValue{}, "item", "repeatable")
	return fs
}

func TestFlagsFromUsage(t *testing.T) {
	fs := testFlagSet()
	var usage strings.Builder
	fs.SetOutput(&usage)
	fs.PrintDefaults()
	got, err := FlagsFromUsage(usage.String())
	if err != nil {
		t.Fatal(err)
	}
	want := FlagsOf(fs)
	// A custom flag's zero value is not printed, so it reads back empty.
	want[slices.IndexFunc(want, func(f Flag) bool { return f.Name == "item" })].Default = ""
	if !slices.Equal(got, want) {
		t.Fatalf("FlagsFromUsage =\n%v\nwant\n%v\nfrom\n%s", got, want, usage.String())
	}
	if _, err := FlagsFromUsage("no flags here"); err == nil {
		t.Fatal("FlagsFromUsage of text without flags: no error")
	}
}

func TestCheckFlagsDocumented(t *testing.T) {
	const complete = "## tool\n\n| flag | default | meaning |\n|---|---|---|\n" +
		"| `--name` | `x\\|y` | a name |\n| `--empty` | none | nothing |\n| `--on` | `true` | on |\n" +
		"| `--off` | `false` | off |\n| `--count` | `0` (none) | how many |\n| `--wait` | `2s` | how long |\n" +
		"| `--item` | none | repeatable |\n| `ENV` | — | not a flag |\n\n## other\n\n| flag | default | meaning |\n|---|---|---|\n| `--gone` | none | another tool's |\n"
	tests := []struct {
		name string
		doc  string
		want []string // a substring of each error, in order
	}{
		{name: "complete", doc: complete},
		{name: "missing", doc: strings.Replace(complete, "| `--wait` | `2s` | how long |\n", "", 1),
			want: []string{"does not document --wait of tool. Add this row", "| `--wait` | `2s` | how long |"}},
		{name: "gone", doc: strings.Replace(complete, "| `--on`", "| `--onn`", 1),
			want: []string{"does not document --on of tool", "documents --onn under \"## tool\", but tool has no such flag"}},
		{name: "other default", doc: strings.Replace(complete, "`2s`", "`3s`", 1),
			want: []string{"gives --wait of tool the default `3s`, but the flag's default is `2s`"}},
		{name: "empty default given", doc: strings.Replace(complete, "| `--empty` | none", "| `--empty` | `e`", 1),
			want: []string{"gives --empty of tool the default `e`, but the flag's default is none"}},
		{name: "listed twice", doc: strings.Replace(complete, "| `ENV`", "| `--off` | `false` | again |\n| `ENV`", 1),
			want: []string{"lists --off twice"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := filepath.Join(t.TempDir(), "options.md")
			if err := os.WriteFile(doc, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			rec := &errorRecorder{TB: t}
			CheckFlagsDocumented(rec, doc, "tool", FlagsOf(testFlagSet()))
			checkErrors(t, rec.errors, tc.want)
		})
	}
}

func TestCheckMetricsDocumented(t *testing.T) {
	const doc = "## a\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n" +
		"| `x_total` | counter | `code`, `method` | calls |\n\n## b\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n" +
		"| `y_seconds` | histogram | none | time |\n"
	metrics := []Metric{
		{Name: "x_total", Type: "counter", Labels: []string{"method", "code"}},
		{Name: "y_seconds", Type: "histogram"},
	}
	tests := []struct {
		name     string
		sections []string
		metrics  []Metric
		want     []string
	}{
		{name: "complete", sections: []string{"a", "b"}, metrics: metrics},
		{name: "section left out", sections: []string{"a"}, metrics: metrics,
			want: []string{"does not document the metric y_seconds. Add this row", "| `y_seconds` | histogram | none |"}},
		{name: "gone", sections: []string{"a", "b"}, metrics: metrics[:1],
			want: []string{"documents the metric y_seconds, but no binary checked here exposes it"}},
		{name: "other labels", sections: []string{"a", "b"},
			metrics: []Metric{{Name: "x_total", Type: "counter", Labels: []string{"method"}}, metrics[1]},
			want:    []string{"documents x_total as type \"counter\" with labels `code`, `method`; it is a counter with labels `method`"}},
		{name: "other type", sections: []string{"a", "b"},
			metrics: []Metric{metrics[0], {Name: "y_seconds", Type: "summary"}},
			want:    []string{"documents y_seconds as type \"histogram\" with labels none; it is a summary"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "metrics.md")
			if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			rec := &errorRecorder{TB: t}
			CheckMetricsDocumented(rec, path, tc.sections, tc.metrics)
			checkErrors(t, rec.errors, tc.want)
		})
	}
}

// checkErrors fails unless every want is found in errors, in order, or,
// when want is empty, unless there are no errors.
func checkErrors(t *testing.T, errors, want []string) {
	t.Helper()
	all := strings.Join(errors, "\n")
	for _, w := range want {
		i := strings.Index(all, w)
		if i < 0 {
			t.Fatalf("errors lack %q:\n%s", w, all)
		}
		all = all[i+len(w):]
	}
	if len(want) == 0 && len(errors) > 0 {
		t.Fatalf("unexpected errors:\n%s", strings.Join(errors, "\n"))
	}
}

func TestRecordedMetrics(t *testing.T) {
	rec := &RecordingRegisterer{Registerer: prometheus.NewRegistry()}
	rec.MustRegister(
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "calls_total", Help: "calls"}, []string{"method", "code"}),
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "call_seconds", Help: "time"}, []string{"method"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "queue", Help: "waiting"}),
		prometheus.NewCounter(prometheus.CounterOpts{Name: "starts_total", Help: "starts"}),
	)
	got, err := rec.RecordedMetrics()
	if err != nil {
		t.Fatal(err)
	}
	want := []Metric{
		{Name: "calls_total", Type: "counter", Labels: []string{"method", "code"}, Help: "calls"},
		{Name: "call_seconds", Type: "histogram", Labels: []string{"method"}, Help: "time"},
		{Name: "queue", Type: "gauge", Help: "waiting"},
		{Name: "starts_total", Type: "counter", Help: "starts"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("RecordedMetrics = %+v, want %+v", got, want)
	}
}

func TestMarkdownBlocks(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []Block
	}{
		{name: "paragraph lines joined", src: "# Title\n\nOne line\n  and the next.\n\nAnother.\n",
			want: []Block{
				{Kind: Heading, Line: 1, Text: "Title"},
				{Kind: Paragraph, Line: 3, Text: "One line and the next."},
				{Kind: Paragraph, Line: 6, Text: "Another."},
			}},
		{name: "list items with continuations", src: "## `a` b\n- first\n  more\n- second\n1. third\n",
			want: []Block{
				{Kind: Heading, Line: 1, Text: "a b"},
				{Kind: ListItem, Line: 2, Text: "- first more"},
				{Kind: ListItem, Line: 4, Text: "- second"},
				{Kind: ListItem, Line: 5, Text: "1. third"},
			}},
		{name: "table with caption and note", src: "Measured:\n\n| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n\nAfter.\n",
			want: []Block{
				{Kind: Paragraph, Line: 1, Text: "Measured:"},
				{Kind: TableRow, Line: 5, Text: "| 1 | 2 |", Header: "| a | b |", Caption: "Measured:", Note: "After."},
				{Kind: TableRow, Line: 6, Text: "| 3 | 4 |", Header: "| a | b |", Caption: "Measured:", Note: "After."},
				{Kind: Paragraph, Line: 8, Text: "After."},
			}},
		{name: "table after a heading has no caption", src: "## h\n| a |\n|---|\n| 1 |\n## i\n",
			want: []Block{
				{Kind: Heading, Line: 1, Text: "h"},
				{Kind: TableRow, Line: 4, Text: "| 1 |", Header: "| a |"},
				{Kind: Heading, Line: 5, Text: "i"},
			}},
		{name: "fenced code, lines kept apart", src: "text\n```sh\nmake a  # one\n\n| not a table |\n```\n",
			want: []Block{
				{Kind: Paragraph, Line: 1, Text: "text"},
				{Kind: CodeLine, Line: 3, Text: "make a  # one", Fence: "sh"},
				{Kind: CodeLine, Line: 4, Text: "", Fence: "sh"},
				{Kind: CodeLine, Line: 5, Text: "| not a table |", Fence: "sh"},
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MarkdownBlocks(tc.src); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("MarkdownBlocks =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}
