package parameters

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"
)

// VolumeTemplateData is what a tag template in a StorageClass or a
// VolumeAttributesClass can refer to: {{ .PVCName }}, {{ .PVCNamespace }} and
// {{ .PVName }}. The values come from the provisioner's and resizer's
// --extra-create-metadata / --extra-modify-metadata parameters and are empty
// when the sidecar does not send them.
type VolumeTemplateData struct {
	PVCName      string
	PVCNamespace string
	PVName       string
}

// SnapshotTemplateData is what a tag template in a VolumeSnapshotClass can
// refer to: {{ .VolumeSnapshotName }}, {{ .VolumeSnapshotNamespace }} and
// {{ .VolumeSnapshotContentName }}, from the snapshotter's
// --extra-create-metadata parameters.
type SnapshotTemplateData struct {
	VolumeSnapshotName        string
	VolumeSnapshotNamespace   string
	VolumeSnapshotContentName string
}

// maxTemplateOutput bounds what one template may write. A tag value holds at
// most maxTagValueLength characters, so anything much longer is an error
// anyway; the bound stops a template from building a huge string first.
const maxTemplateOutput = 4 * maxTagValueLength

// templateFuncs are the functions a tag template may call besides the safe
// text/template builtins. Their names and argument order match the upstream
// AWS EBS CSI driver's, so its StorageClasses work here unchanged; the string
// being worked on comes last so they read well in a pipeline
// ({{ .PVCName | toUpper }}). None of them can panic or allocate more than
// their input.
var templateFuncs = template.FuncMap{
	"contains":  func(substr, s string) bool { return strings.Contains(s, substr) },
	"toUpper":   strings.ToUpper,
	"toLower":   strings.ToLower,
	"substring": substring,
	"field":     field,
	"index":     func(substr, s string) int { return strings.Index(s, substr) },
	"lastIndex": func(substr, s string) int { return strings.LastIndex(s, substr) },
}

// safeBuiltins are the text/template builtins a tag template may use. The
// others are refused when the template is parsed: call (invokes arbitrary
// function values), printf (a width such as %999999999d allocates without
// bound), and html, js and urlquery (escapers that make no sense in a tag).
var safeBuiltins = map[string]bool{
	"and": true, "or": true, "not": true, "len": true, "slice": true,
	"print": true, "println": true,
	"eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true,
}

// substring returns s[start:end] counted in bytes, clamped to s: a negative
// start means from the beginning and a negative or too large end means to
// the end, as upstream documents it.
func substring(start, end int, s string) string {
	if start < 0 {
		start = 0
	}
	if end < 0 || end > len(s) {
		end = len(s)
	}
	if start >= end {
		return ""
	}
	return s[start:end]
}

// field splits s at every delim and returns the idx-th piece (from 0).
func field(delim string, idx int, s string) (string, error) {
	parts := strings.Split(s, delim)
	if idx < 0 || idx >= len(parts) {
		return "", fmt.Errorf("field %d of %q split at %q does not exist (it has %d)", idx, s, delim, len(parts))
	}
	return parts[idx], nil
}

// evaluateTemplate renders one tag value template over data. Only plain
// output, variables, fields of data, if/else, with and the allowed functions
// are accepted: no range loops, no named templates, no define or block. That
// keeps evaluation linear in the template's length, so a StorageClass cannot
// make the controller spin or allocate without bound.
func evaluateTemplate(key, text string, data any) (string, error) {
	t, err := template.New(key).Funcs(templateFuncs).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", invalid(key, "bad template: %s", templateErrorText(err))
	}
	for _, named := range t.Templates() {
		if named.Name() != key {
			return "", invalid(key, "bad template: define and block are not allowed")
		}
	}
	if t.Tree == nil || t.Root == nil {
		return "", nil
	}
	if err := checkNodes(t.Root); err != nil {
		return "", invalid(key, "bad template: %s", err)
	}
	out := &limitedBuffer{limit: maxTemplateOutput}
	if err := t.Execute(out, data); err != nil {
		if errors.Is(err, errTemplateOutputTooLong) {
			return "", invalid(key, "template output is longer than %d bytes", maxTemplateOutput)
		}
		return "", invalid(key, "template failed: %s", templateErrorText(err))
	}
	return out.String(), nil
}

// templateErrorText drops text/template's "template: <name>:" prefix, which
// only repeats the parameter key the Error already names.
func templateErrorText(err error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "template: "); ok {
		msg = rest
	}
	return msg
}

// checkNodes walks a parsed template and refuses every construct that is
// not plain, bounded evaluation.
func checkNodes(node parse.Node) error {
	switch n := node.(type) {
	case nil:
		return nil
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkNodes(c); err != nil {
				return err
			}
		}
		return nil
	case *parse.TextNode, *parse.CommentNode, *parse.FieldNode, *parse.VariableNode,
		*parse.DotNode, *parse.StringNode, *parse.NumberNode, *parse.BoolNode, *parse.NilNode:
		return nil
	case *parse.ActionNode:
		return checkNodes(n.Pipe)
	case *parse.PipeNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Cmds {
			if err := checkNodes(c); err != nil {
				return err
			}
		}
		return nil
	case *parse.CommandNode:
		for _, a := range n.Args {
			if err := checkNodes(a); err != nil {
				return err
			}
		}
		return nil
	case *parse.ChainNode:
		return checkNodes(n.Node)
	case *parse.IdentifierNode:
		if _, ok := templateFuncs[n.Ident]; ok || safeBuiltins[n.Ident] {
			return nil
		}
		return fmt.Errorf("function %q is not allowed", n.Ident)
	case *parse.IfNode:
		return checkBranch(&n.BranchNode)
	case *parse.WithNode:
		return checkBranch(&n.BranchNode)
	default:
		return fmt.Errorf("%q is not allowed (only text, fields, if, with and the documented functions are)", firstWord(node.String()))
	}
}

func checkBranch(b *parse.BranchNode) error {
	for _, c := range []parse.Node{b.Pipe, b.List, b.ElseList} {
		if err := checkNodes(c); err != nil {
			return err
		}
	}
	return nil
}

// firstWord names a refused construct by its keyword: "{{range .X}}…" → "range".
func firstWord(s string) string {
	s = strings.TrimPrefix(s, "{{")
	s = strings.TrimLeft(s, "- ")
	if i := strings.IndexAny(s, " }"); i >= 0 {
		s = s[:i]
	}
	return s
}

var errTemplateOutputTooLong = errors.New("template output too long")

// limitedBuffer is a bytes.Buffer that refuses to grow past limit, which
// stops template execution at once.
type limitedBuffer struct {
	bytes.Buffer
	limit int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.limit {
		return 0, errTemplateOutputTooLong
	}
	return b.Buffer.Write(p)
}
