package testutil

import (
	"bufio"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The reference pages (docs/options.md, docs/metrics.md) are tables, one
// row per flag or metric. Tests compare them with what the binaries really
// define, so a flag or metric cannot be added, renamed or dropped, or a
// default changed, without the page saying so. The helpers below read the
// tables and tell the engineer exactly which row to add, change or remove.

// DocTables reads the Markdown file at path and returns the body rows of its
// tables, grouped by the "## " section they are in (the heading's text
// without backticks). Each row is its cells, trimmed; header and separator
// rows are left out.
func DocTables(t testing.TB, path string) map[string][][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tables := map[string][][]string{}
	section, inCode, header := "", false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "```"):
			inCode = !inCode
		case inCode:
		case strings.HasPrefix(line, "## "):
			section = strings.ReplaceAll(strings.TrimPrefix(line, "## "), "`", "")
		case !strings.HasPrefix(line, "|"):
			header = true // the next table starts with its header row
		case header:
			header = false
		case strings.Trim(line, "|-: ") == "":
			// the separator row
		default:
			tables[section] = append(tables[section], splitRow(line))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return tables
}

// splitRow splits a table row into trimmed cells; "\|" inside a cell is a
// literal bar.
func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	line = strings.ReplaceAll(line, `\|`, "\x00")
	cells := strings.Split(line, "|")
	for i, c := range cells {
		cells[i] = strings.ReplaceAll(strings.TrimSpace(c), "\x00", "|")
	}
	return cells
}

// CodeSpans returns the texts of a cell's `code spans`, in order.
func CodeSpans(cell string) []string {
	var spans []string
	for {
		start := strings.Index(cell, "`")
		if start < 0 {
			return spans
		}
		end := strings.Index(cell[start+1:], "`")
		if end < 0 {
			return spans
		}
		spans = append(spans, cell[start+1:start+1+end])
		cell = cell[start+2+end:]
	}
}

// Flag is one command-line flag as a binary defines it.
type Flag struct {
	Name    string
	Default string // as the flag package reports it (DefValue)
	Usage   string
}

// FlagsOf lists the flags defined in fs.
func FlagsOf(fs *flag.FlagSet) []Flag {
	var flags []Flag
	fs.VisitAll(func(f *flag.Flag) {
		flags = append(flags, Flag{Name: f.Name, Default: f.DefValue, Usage: f.Usage})
	})
	return flags
}

// usageLine is the first line of one flag in flag.PrintDefaults: the flag,
// and the type name unless it is a bool flag.
var usageLine = regexp.MustCompile(`^  -(\S+)(?: (\S+))?(?:\t(.*))?$`)

// usageDefault ends a flag's usage when its default is not the zero value.
var usageDefault = regexp.MustCompile(` \(default (.*)\)$`)

// FlagsFromUsage reads the flags back from what flag.PrintDefaults printed
// (what a binary prints for -h), for flag sets a test cannot reach. A flag
// whose default is not printed has its type's zero value.
func FlagsFromUsage(usage string) ([]Flag, error) {
	var flags []Flag
	lines := strings.Split(usage, "\n")
	for i := 0; i < len(lines); i++ {
		m := usageLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		f := Flag{Name: m[1], Usage: m[3]}
		for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    \t") {
			i++
			f.Usage = strings.TrimSpace(f.Usage + " " + strings.TrimPrefix(lines[i], "    \t"))
		}
		switch m[2] {
		case "":
			f.Default = "false"
		case "int", "uint", "int64", "uint64", "float":
			f.Default = "0"
		case "duration":
			f.Default = "0s"
		}
		if d := usageDefault.FindStringSubmatch(f.Usage); d != nil {
			f.Usage = strings.TrimSuffix(f.Usage, d[0])
			f.Default = d[1]
			if unquoted, err := strconv.Unquote(d[1]); err == nil {
				f.Default = unquoted
			}
		}
		flags = append(flags, f)
	}
	if len(flags) == 0 {
		return nil, fmt.Errorf("no flags in the usage text:\n%s", usage)
	}
	return flags, nil
}

// noDefault is how a table says a flag's default is empty. A repeatable
// flag with nothing set reports "[]".
const noDefault = "none"

func documentedDefault(d string) string {
	if d == "" || d == "[]" {
		return noDefault
	}
	return "`" + d + "`"
}

// CheckFlagsDocumented fails t for every flag that no table row under
// "## section" of the Markdown file doc names, every row naming a flag
// that flags lacks, every flag named twice, and every documented default
// that differs from the flag's. A row documents a flag when its first cell
// is a code span starting with a dash (`--name`); its second cell starts
// with the default as a code span, or with "none" for an empty one.
func CheckFlagsDocumented(t testing.TB, doc, section string, flags []Flag) {
	t.Helper()
	tables := DocTables(t, doc)
	doc = displayPath(doc)
	rows := map[string][]string{}
	for _, row := range tables[section] {
		spans := CodeSpans(row[0])
		if len(spans) == 0 || !strings.HasPrefix(spans[0], "-") {
			continue
		}
		name := strings.TrimLeft(spans[0], "-")
		if _, twice := rows[name]; twice {
			t.Errorf("%s lists --%s twice under %q: keep one row", doc, name, "## "+section)
		}
		rows[name] = row
	}
	for _, f := range flags {
		row, ok := rows[f.Name]
		delete(rows, f.Name)
		want := documentedDefault(f.Default)
		if !ok {
			t.Errorf("%s does not document --%s of %s. Add this row to the fitting table under %q (and say more than the usage text where it helps):\n| `--%s` | %s | %s |",
				doc, f.Name, section, "## "+section, f.Name, want, escapeCell(f.Usage))
			continue
		}
		got := noDefault
		if len(row) < 2 {
			got = ""
		} else if !strings.HasPrefix(row[1], noDefault) {
			if spans := CodeSpans(row[1]); len(spans) > 0 && strings.HasPrefix(row[1], "`") {
				got = "`" + spans[0] + "`"
			} else {
				got = row[1]
			}
		}
		if got != want {
			t.Errorf("%s gives --%s of %s the default %s, but the flag's default is %s: start the row's default cell with %s",
				doc, f.Name, section, got, want, want)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(rows)) {
		t.Errorf("%s documents --%s under %q, but %s has no such flag: remove the row, or correct its name", doc, name, "## "+section, section)
	}
}

// Metric is one metric family as a binary registers it.
type Metric struct {
	Name string
	// Type is counter, gauge, histogram, summary or untyped.
	Type   string
	Labels []string
	Help   string
}

// metricName is what a metric name looks like.
var metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

// CheckMetricsDocumented fails t for every metric that no table row under
// the given "## " sections of the Markdown file doc names, every row naming
// a metric that metrics lacks, and every documented type or label set that
// differs. A row documents a metric when its first cell is a code span
// holding a metric name; its second cell is the type and its third the
// labels as code spans ("none" for none).
func CheckMetricsDocumented(t testing.TB, doc string, sections []string, metrics []Metric) {
	t.Helper()
	tables := DocTables(t, doc)
	doc = displayPath(doc)
	rows := map[string][]string{}
	for _, section := range sections {
		for _, row := range tables[section] {
			spans := CodeSpans(row[0])
			if len(spans) == 0 || !metricName.MatchString(spans[0]) {
				continue
			}
			if _, twice := rows[spans[0]]; twice {
				t.Errorf("%s lists %s twice: keep one row", doc, spans[0])
			}
			rows[spans[0]] = row
		}
	}
	for _, m := range metrics {
		labels := slices.Sorted(slices.Values(m.Labels))
		want := []string{m.Type, noDefault}
		if len(labels) > 0 {
			want[1] = "`" + strings.Join(labels, "`, `") + "`"
		}
		row, ok := rows[m.Name]
		delete(rows, m.Name)
		if !ok {
			t.Errorf("%s does not document the metric %s. Add this row to the fitting table under one of %q:\n| `%s` | %s | %s | %s |",
				doc, m.Name, sections, m.Name, want[0], want[1], escapeCell(m.Help))
			continue
		}
		got := []string{"", ""}
		if len(row) >= 3 {
			got = []string{row[1], noDefault}
			if spans := CodeSpans(row[2]); len(spans) > 0 {
				got[1] = "`" + strings.Join(slices.Sorted(slices.Values(spans)), "`, `") + "`"
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s documents %s as type %q with labels %s; it is a %s with labels %s: correct the row",
				doc, m.Name, got[0], got[1], want[0], want[1])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(rows)) {
		t.Errorf("%s documents the metric %s, but no binary checked here exposes it: remove the row, or correct its name", doc, name)
	}
}

// displayPath names a page the way the repository does (docs/options.md),
// whatever directory the test runs in.
func displayPath(path string) string {
	return strings.TrimLeft(filepath.ToSlash(path), "./")
}

// escapeCell makes text safe inside a table cell.
func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// BlockKind is what a Block of a Markdown page is.
type BlockKind int

// The kinds of blocks MarkdownBlocks tells apart: the units that checks of
// what a page claims look at (a claim and what backs it must be in one
// block, or in a table's caption or note).
const (
	// Paragraph is consecutive lines of text, joined by spaces.
	Paragraph BlockKind = iota
	// ListItem is one item of a list, its continuation lines included.
	ListItem
	// TableRow is one body row of a table.
	TableRow
	// CodeLine is one line of a fenced code block.
	CodeLine
	// Heading is a heading line.
	Heading
)

// Block is one unit of a Markdown page, as MarkdownBlocks splits it.
type Block struct {
	// Kind is what the block is, which decides where a check looks for
	// what backs a claim in it.
	Kind BlockKind
	// Line is the page's line (from 1) the block starts on.
	Line int
	// Text is the block's text: lines of a paragraph or list item trimmed
	// and joined by single spaces; a table row or code line as it stands
	// (trimmed); a heading without its leading #s and backticks.
	Text string
	// Fence is a code line's fence info string ("sh", "mermaid", "").
	Fence string
	// Header, Caption and Note belong to a table row: the table's header
	// row, the paragraph or list item right before the table, and the
	// paragraph right after it ("" when there is none), which is where a
	// page says what a table shows and where it comes from.
	Header, Caption, Note string
}

// listItemStart is the start of a list item: a bullet or a number.
var listItemStart = regexp.MustCompile(`^\s*(?:[-*+]|\d+[.)])\s+`)

// MarkdownBlocks splits a Markdown page into blocks, in page order. It
// knows the Markdown the docs use (ATX headings, fenced code, pipe tables,
// lists, paragraphs), not the whole of CommonMark.
func MarkdownBlocks(src string) []Block {
	var (
		blocks  []Block
		cur     *Block // the paragraph or list item being read
		fence   string // the open code fence's marker; "" outside code
		info    string // the open code fence's info string
		header  string // the header row of the table being read
		inTable bool
		caption string
	)
	flush := func() {
		if cur != nil {
			blocks = append(blocks, *cur)
			cur = nil
		}
	}
	for i, raw := range strings.Split(src, "\n") {
		line := strings.TrimSpace(raw)
		if !strings.HasPrefix(line, "|") || fence != "" {
			inTable = false
		}
		switch {
		case fence != "":
			if strings.HasPrefix(line, fence) && strings.Trim(line, fence[:1]) == "" {
				fence = ""
				continue
			}
			blocks = append(blocks, Block{Kind: CodeLine, Line: i + 1, Text: line, Fence: info})
		case strings.HasPrefix(line, "```") || strings.HasPrefix(line, "~~~"):
			flush()
			fence = line[:3]
			info = strings.TrimSpace(strings.TrimLeft(line, fence[:1]))
		case strings.HasPrefix(line, "|"):
			if !inTable {
				flush()
				inTable, header, caption = true, line, ""
				if n := len(blocks); n > 0 && (blocks[n-1].Kind == Paragraph || blocks[n-1].Kind == ListItem) {
					caption = blocks[n-1].Text
				}
				continue
			}
			if strings.Trim(line, "|-: ") == "" {
				continue // the separator row
			}
			blocks = append(blocks, Block{Kind: TableRow, Line: i + 1, Text: line, Header: header, Caption: caption})
		case line == "":
			flush()
		case strings.HasPrefix(line, "#"):
			flush()
			heading := strings.ReplaceAll(strings.TrimSpace(strings.TrimLeft(line, "#")), "`", "")
			blocks = append(blocks, Block{Kind: Heading, Line: i + 1, Text: heading})
		case listItemStart.MatchString(raw):
			flush()
			cur = &Block{Kind: ListItem, Line: i + 1, Text: line}
		case cur != nil:
			cur.Text += " " + line
		default:
			cur = &Block{Kind: Paragraph, Line: i + 1, Text: line}
		}
	}
	flush()
	// A table's note is the paragraph right after its last row.
	for i := len(blocks) - 2; i >= 0; i-- {
		if blocks[i].Kind != TableRow {
			continue
		}
		switch next := blocks[i+1]; {
		case next.Kind == Paragraph:
			blocks[i].Note = next.Text
		case next.Kind == TableRow && next.Header == blocks[i].Header && next.Caption == blocks[i].Caption:
			blocks[i].Note = next.Note
		}
	}
	return blocks
}

// DocBlocks reads the Markdown file at path and splits it with
// MarkdownBlocks.
func DocBlocks(t testing.TB, path string) []Block {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return MarkdownBlocks(string(src))
}
