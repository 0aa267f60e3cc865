// Command readme writes the values table of the chart's README from the
// chart's values.yaml: one row per value, with its path (as --set names
// it), its default and the comment above it, so that the table can never
// say what values.yaml does not. The rest of the README is written by hand;
// the table goes between its two marker lines.
//
//	go run ./hack/chart/readme          (make chart-readme) rewrite the table
//	go run ./hack/chart/readme -check   fail when the table is out of date (CI)
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The marker lines the table sits between in the README.
const (
	beginMarker = "<!-- values table: written by make chart-readme from values.yaml; do not edit by hand -->"
	endMarker   = "<!-- end of values table -->"
)

func main() {
	values := flag.String("values", "charts/diskplane/values.yaml", "the chart's values file")
	readme := flag.String("readme", "charts/diskplane/README.md", "the README whose values table to write")
	check := flag.Bool("check", false, "only check that the table is up to date")
	flag.Parse()
	if err := run(*values, *readme, *check); err != nil {
		fmt.Fprintln(os.Stderr, "readme:", err)
		os.Exit(1)
	}
}

// run writes (or, with check, checks) the values table of readme.
func run(valuesPath, readmePath string, check bool) error {
	src, err := os.ReadFile(valuesPath)
	if err != nil {
		return err
	}
	table, err := valuesTable(src)
	if err != nil {
		return fmt.Errorf("%s: %w", valuesPath, err)
	}
	old, err := os.ReadFile(readmePath)
	if err != nil {
		return err
	}
	updated, err := withTable(old, table)
	if err != nil {
		return fmt.Errorf("%s: %w", readmePath, err)
	}
	if check {
		if !bytes.Equal(old, updated) {
			return fmt.Errorf("%s is out of date with %s: run make chart-readme and commit the result", readmePath, valuesPath)
		}
		fmt.Printf("%s is up to date\n", readmePath)
		return nil
	}
	return os.WriteFile(readmePath, updated, 0o644)
}

// withTable returns readme with the text between its marker lines replaced
// by table.
func withTable(readme []byte, table string) ([]byte, error) {
	before, rest, ok := bytes.Cut(readme, []byte(beginMarker+"\n"))
	if !ok {
		return nil, fmt.Errorf("no line %q", beginMarker)
	}
	_, after, ok := bytes.Cut(rest, []byte(endMarker))
	if !ok {
		return nil, fmt.Errorf("no line %q after the first marker", endMarker)
	}
	var out bytes.Buffer
	out.Write(before)
	out.WriteString(beginMarker + "\n" + table + endMarker)
	out.Write(after)
	return out.Bytes(), nil
}

// row is one value of the table.
type row struct {
	path, def, comment string
}

// valuesTable renders the values of a values.yaml as a Markdown table.
func valuesTable(src []byte) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return "", err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return "", errors.New("the values are not a mapping")
	}
	rows, err := mappingRows("", doc.Content[0])
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| value | default | what it does |\n|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.path, r.def, r.comment)
	}
	return b.String(), nil
}

// identifier is a key --set can name without quoting.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// mappingRows returns the rows of a mapping's keys, below prefix. A key
// whose value is a mapping of plain keys is a row only when it has a
// comment (what the group is for), and its keys follow; any other value (a
// scalar, a list, an empty mapping, or a mapping of free-form keys such as
// a node selector) is one row with that value as its default.
func mappingRows(prefix string, m *yaml.Node) ([]row, error) {
	var rows []row
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, value := m.Content[i], m.Content[i+1]
		if !identifier.MatchString(key.Value) {
			return nil, fmt.Errorf("key %q below %q: the table names values by --set paths, which need plain keys", key.Value, prefix)
		}
		path := key.Value
		if prefix != "" {
			path = prefix + "." + key.Value
		}
		comment := commentText(key.HeadComment)
		if value.Kind == yaml.MappingNode && len(value.Content) > 0 && plainKeys(value) {
			if comment != "" {
				rows = append(rows, row{path: path, comment: comment})
			}
			sub, err := mappingRows(path, value)
			if err != nil {
				return nil, err
			}
			rows = append(rows, sub...)
			continue
		}
		def, err := defaultText(value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		rows = append(rows, row{path: path, def: def, comment: comment})
	}
	return rows, nil
}

// plainKeys reports whether every key of a mapping is an identifier.
func plainKeys(m *yaml.Node) bool {
	for i := 0; i < len(m.Content); i += 2 {
		if !identifier.MatchString(m.Content[i].Value) {
			return false
		}
	}
	return true
}

// entry is a line of an indented list in a comment: a name, two spaces or
// more, and what it means.
var entry = regexp.MustCompile(`^(\S+)\s{2,}(.*)$`)

// commentText renders a head comment as the text of one table cell. Its
// lines are joined by spaces, but for the indented lists values.yaml's
// comments use ("#   name   what it means"): each item starts a new line
// of the cell, its name as code, and the item's deeper-indented lines
// continue it.
func commentText(comment string) string {
	var b strings.Builder
	itemIndent := 0 // the indentation of the list's items; 0 outside a list
	for _, line := range strings.Split(comment, "\n") {
		text := strings.TrimPrefix(strings.TrimSpace(line), "#")
		indent := len(text) - len(strings.TrimLeft(text, " "))
		text = markdownText(strings.Join(strings.Fields(text), " "))
		switch {
		case text == "":
			continue
		case indent >= 2 && (itemIndent == 0 || indent <= itemIndent):
			itemIndent = indent
			if m := entry.FindStringSubmatch(strings.TrimSpace(line[strings.Index(line, "#")+1:])); m != nil {
				text = "`" + m[1] + "` " + markdownText(strings.Join(strings.Fields(m[2]), " "))
			}
			b.WriteString("<br>")
		case indent < 2 && itemIndent > 0:
			itemIndent = 0
			b.WriteString("<br>")
		case b.Len() > 0:
			b.WriteString(" ")
		}
		b.WriteString(text)
	}
	return b.String()
}

// markdownText escapes what Markdown would otherwise read as markup in a
// table cell: backslashes, angle brackets (HTML) and bars (cell ends).
func markdownText(text string) string {
	return strings.NewReplacer(`\`, `\\`, "<", "&lt;", ">", "&gt;", "|", `\|`).Replace(text)
}

// defaultText renders a value as a code span: a scalar as values.yaml
// writes it ("" for an empty string), anything else in YAML's flow style.
func defaultText(value *yaml.Node) (string, error) {
	if value.Kind == yaml.ScalarNode {
		if value.Value == "" && value.Tag == "!!str" {
			return "`\"\"`", nil
		}
		return "`" + value.Value + "`", nil
	}
	flow := flowCopy(value)
	out, err := yaml.Marshal(flow)
	if err != nil {
		return "", err
	}
	return "`" + strings.TrimSpace(string(out)) + "`", nil
}

// flowCopy copies a node in flow style without its comments.
func flowCopy(n *yaml.Node) *yaml.Node {
	c := *n
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	if c.Kind == yaml.MappingNode || c.Kind == yaml.SequenceNode {
		c.Style = yaml.FlowStyle
	}
	c.Content = nil
	for _, child := range n.Content {
		c.Content = append(c.Content, flowCopy(child))
	}
	return &c
}
