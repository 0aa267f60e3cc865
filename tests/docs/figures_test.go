package docs

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// Time figures. A time figure is a number, or a range of two, followed by
// a unit of time: µs, ms, s, sec, min, minute(s), second(s), hour(s), and
// optionally a second number and unit ("4 min 10 s" is one figure). A
// figure is measured, and must say when and at which commit it was
// measured, when
//
//   - its sentence (a paragraph or list item is cut into sentences at ".",
//     "!" or "?" before a capital, a backtick or a bracket) has a word of
//     measurement: measured, took, timed, lasted, or passed, ran, finished,
//     ready or done followed by "in";
//   - or a word right before the figure says it was timed: about, around,
//     roughly, nearly, approximately, some or ~ (a setting is exact, so an
//     approximate figure is one somebody timed), or "in" before minutes
//     (passed in 48.9 minutes, done in 6 min 24 s);
//   - or it is in a row of a table whose header names a column time, took or
//     duration, or whose caption (the paragraph or list item right before
//     it) has a word of measurement: every duration of such a table is
//     measured;
//   - or it is on a line of a fenced code block (but mermaid diagrams, which
//     describe behaviour) and the line meets one of the rules above.
//
// Durations that are settings (flag defaults, timeouts, intervals, EC2's
// limits such as four modifications within 24 hours) are written without
// those words, so they are not measured figures.
//
// A measured figure carries a date (YYYY-MM-DD) and a commit (7 to 40 hex
// digits, in backticks, or bare with both a letter and a digit) somewhere
// in: its block (paragraph, list item, table row or code line); for a
// table row, the table's header, caption and note (the paragraph right
// after it); or a measurement statement of its section: an earlier
// paragraph or list item under the same heading with a word of measurement,
// a date and a commit ("Measured on 2026-11-25 at commit `20c95e2`, …").

// duration is one time figure; its second group is its first unit.
var duration = regexp.MustCompile(`(?:^|[^\w.])(~?\d+(?:\.\d+)?(?:\s*[–-]\s*\d+(?:\.\d+)?)?\s*(µs|ms|s|sec|min|minutes?|seconds?|hours?)(?:\s+\d+(?:\.\d+)?\s*(?:µs|ms|s|sec|min|minutes?|seconds?))?)\b`)

// measurementWord is a word that says a figure was measured.
var measurementWord = regexp.MustCompile(`(?i)\b(?:measured|took|timed|lasted|(?:passed|ran|finished|ready|done) in)\b`)

// approximately ends the text right before an approximate figure.
var approximately = regexp.MustCompile(`(?i)\b(?:about|around|roughly|nearly|approximately|some)\s+$`)

// inBefore ends the text right before a figure that says what took so long.
var inBefore = regexp.MustCompile(`\bin\s+$`)

// timeColumn is a table header that names a column of times.
var timeColumn = regexp.MustCompile(`(?i)\b(?:time|took|duration)\b`)

// date is a calendar date, YYYY-MM-DD.
var date = regexp.MustCompile(`\b20\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b`)

// A commit is an abbreviated or full hash: in backticks, or bare with a
// letter and a digit (so that numbers and words are not taken for one).
var (
	quotedCommit = regexp.MustCompile("`[0-9a-f]{7,40}`")
	bareCommit   = regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)
)

// hasCommit reports whether text names a commit.
func hasCommit(text string) bool {
	if quotedCommit.MatchString(text) {
		return true
	}
	for _, c := range bareCommit.FindAllString(text, -1) {
		if strings.ContainsAny(c, "0123456789") && strings.ContainsAny(c, "abcdef") {
			return true
		}
	}
	return false
}

// dated reports whether text holds a date and a commit.
func dated(text string) bool { return date.MatchString(text) && hasCommit(text) }

// sentenceEnd is the end of a sentence: ".", "!" or "?", then space and a
// capital, a backtick or a bracket.
var sentenceEnd = regexp.MustCompile("[.!?]\\s+[A-Z`(\\[]")

// sentences cuts a block's text into sentences.
func sentences(text string) []string {
	var out []string
	for {
		loc := sentenceEnd.FindStringIndex(text)
		if loc == nil {
			return append(out, text)
		}
		out = append(out, text[:loc[0]+1])
		text = text[loc[1]-1:]
	}
}

// measuredIn returns the measured time figures of a sentence (see above);
// all says that every figure in it is measured.
func measuredIn(sentence string, all bool) []string {
	sentence = strings.ReplaceAll(sentence, "**", "")
	all = all || measurementWord.MatchString(sentence)
	var out []string
	for _, m := range duration.FindAllStringSubmatchIndex(sentence, -1) {
		figure, before := sentence[m[2]:m[3]], sentence[:m[2]]
		inMinutes := strings.HasPrefix(sentence[m[4]:m[5]], "min") && inBefore.MatchString(before)
		if all || strings.HasPrefix(figure, "~") || approximately.MatchString(before) || inMinutes {
			out = append(out, figure)
		}
	}
	return out
}

// undatedFigure is a measured time figure without a date and a commit.
type undatedFigure struct {
	line     int
	figure   string
	sentence string
}

// undatedFigures returns the measured time figures of a page's blocks that
// carry no date and commit (see above).
func undatedFigures(blocks []testutil.Block) []undatedFigure {
	var out []undatedFigure
	statement := "" // the section's measurement statement
	for _, b := range blocks {
		var units []string // the sentences, or the row or line
		all, context := false, b.Text
		switch b.Kind {
		case testutil.Heading:
			statement = ""
			continue
		case testutil.Paragraph, testutil.ListItem:
			units = sentences(b.Text)
			if measurementWord.MatchString(b.Text) && dated(b.Text) && statement == "" {
				statement = b.Text
			}
		case testutil.TableRow:
			units = []string{b.Text}
			all = timeColumn.MatchString(b.Header) || measurementWord.MatchString(b.Caption)
			context = strings.Join([]string{b.Text, b.Header, b.Caption, b.Note}, "\n")
		case testutil.CodeLine:
			if b.Fence == "mermaid" {
				continue
			}
			units = []string{b.Text}
		}
		context += "\n" + statement
		if dated(context) {
			continue
		}
		for _, u := range units {
			for _, f := range measuredIn(u, all) {
				out = append(out, undatedFigure{line: b.Line, figure: f, sentence: u})
			}
		}
	}
	return out
}

// TestTimeFiguresCarryDateAndCommit fails for every measured time figure
// of README.md and docs/*.md that does not say when and at which commit it
// was measured (see the rule above).
func TestTimeFiguresCarryDateAndCommit(t *testing.T) {
	for _, path := range pages(t) {
		for _, f := range undatedFigures(testutil.DocBlocks(t, path)) {
			t.Errorf("%s:%d gives %q as measured (%s) with no date (YYYY-MM-DD) and commit beside it: "+
				"add when and at which commit it was measured, or, if it is a setting, write it without words of measurement",
				pageName(path), f.line, f.figure, excerpt(f.sentence))
		}
	}
}

// TestTimeFigureRule proves the rule on made-up pages: what counts as a
// measured figure, and where its date and commit may be.
func TestTimeFigureRule(t *testing.T) {
	tests := []struct {
		name string
		page string
		want []string // the undated figures
	}{
		{name: "measured, undated", page: "The suite took 12 s on two cores.\n", want: []string{"12 s"}},
		{name: "measured, dated", page: "The suite took 12 s on two cores (2026-11-27, `abc1234`).\n"},
		{name: "date without commit", page: "The suite took 12.5 minutes on 2026-11-27.\n", want: []string{"12.5 minutes"}},
		{name: "commit without date", page: "The suite took 3 min at ab12cd3.\n", want: []string{"3 min"}},
		{name: "bare number is no commit", page: "The suite took 3 min on 2026-11-27 over 1234567 calls.\n", want: []string{"3 min"}},
		{name: "digits-only commit in backticks", page: "It took 3 min (2026-11-27, `9293519`).\n"},
		{name: "approximate figure", page: "`make all` (about 15 minutes on two cores).\n", want: []string{"15 minutes"}},
		{name: "setting", page: "The sidecar's timeout is 60 s; it retries after 1 s, doubling to 5 min.\n"},
		{name: "EC2 limit", page: "EC2 allows four modifications of one volume within 24 hours.\n"},
		{name: "in minutes", page: "Every pod reached Running, in 6 min 24 s.\n", want: []string{"6 min 24 s"}},
		{name: "in seconds is no cue", page: "The plugin retries in 5 s.\n"},
		{name: "other sentence", page: "The timeout is 30 s. The run took 4 s.\n", want: []string{"4 s"}},
		{name: "date in another sentence of the paragraph",
			page: "Measured on 2026-11-22 at `8527e1d`. The upgrade rolled out in 3.3 s after the command; it took 37 s.\n"},
		{name: "bold figure", page: "The whole run takes about **57 minutes**.\n", want: []string{"57 minutes"}},
		{name: "time column, undated", page: "The steps:\n\n| step | time |\n|---|---|\n| test | 3.9 min |\n", want: []string{"3.9 min"}},
		{name: "time column, dated caption",
			page: "The steps of the run on 2026-11-27 at `b75a3d8`:\n\n| step | time |\n|---|---|\n| test | 3.9 min |\n"},
		{name: "time column, dated note",
			page: "| n | wall time |\n|---|---|\n| 1 | 7.3 s |\n\nMeasured on 2026-11-27 (commit `453e0be`).\n"},
		{name: "caption with a word of measurement",
			page: "Both were measured in the VM:\n\n| step | qemu |\n|---|---|\n| attach | 0.11 s |\n", want: []string{"0.11 s"}},
		{name: "table of settings", page: "| flag | default |\n|---|---|\n| `--wait` | 30 s |\n"},
		{name: "section statement",
			page: "## P\n\nMeasured on 2026-11-25 at commit `20c95e2`:\n\n- The RPCs took 3.6 s at first.\n"},
		{name: "statement of another section",
			page: "## P\n\nMeasured on 2026-11-25 at commit `20c95e2`.\n\n## Q\n\n- The RPCs took 3.6 s at first.\n",
			want: []string{"3.6 s"}},
		{name: "code line", page: "```sh\nmake chaos  # lifecycles, then an audit (about 4 min)\n```\n", want: []string{"4 min"}},
		{name: "code line, dated", page: "```sh\nmake chaos  # an audit (4 min at 8883ad0, 2026-11-24) took\n```\n"},
		{name: "mermaid", page: "```mermaid\nloop first look when creates took 100 ms\n```\n"},
		{name: "units", page: "It took 4 µs, 30 ms, 2 s, 1 sec, 1 minute, 2 seconds and 3 hours, and 4 min 10 s.\n",
			want: []string{"4 µs", "30 ms", "2 s", "1 sec", "1 minute", "2 seconds", "3 hours", "4 min 10 s"}},
		{name: "ranges", page: "Leases passed 17–26 s after the eviction; it took 2-3 min.\n", want: []string{"17–26 s", "2-3 min"}},
		{name: "not durations", page: "It took k8s 1.35, 4 GiB, 5 % and version v1.3.0 s.\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range undatedFigures(testutil.MarkdownBlocks(tc.page)) {
				got = append(got, f.figure)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("undated figures of\n%s= %q, want %q", tc.page, got, tc.want)
			}
		})
	}
}

// TestSentences proves where sentences end.
func TestSentences(t *testing.T) {
	got := sentences("It took 1.5 s. Then `x` ran, e.g. twice! (Once more.) [A link] ends? no.")
	want := []string{"It took 1.5 s.", "Then `x` ran, e.g. twice!", "(Once more.) [A link] ends? no."}
	if !slices.Equal(got, want) {
		t.Fatalf("sentences = %q, want %q", got, want)
	}
}
