package docs

import (
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// Quoted messages. The docs quote a log line's message, an error's text or
// a gRPC answer as an inline code span, written as the code writes it, with
// "…" for each variable part (an ID, a name, a number, a wrapped error):
// "…" alone or inside a word (vol-…, "…", (…)), and <name>, make the whole
// word variable. A span is a quoted message when
//
//   - on any page, it starts with the name of a gRPC status code and a space
//     (`FailedPrecondition … is not the requested volume`): the driver's
//     answer;
//   - in docs/troubleshooting.md, it has two words or more and is not a
//     command line (its first word is one of commands, or a flag starting
//     with "-"), nor a setting (its first word a lower-case `key:`, a "{",
//     or a key=value in it).
//
// A span that starts with the text of an entry of othersMessages is another
// component's message and is not checked, except for the part from
// "rpc error: code = " on, which is the driver's answer inside it.
//
// What is checked: the message without its leading gRPC form ("rpc error:
// code = X desc = ", or the code's name) is cut at its variable words and at
// ": " (where the code wraps one error in another) into pieces, each trimmed
// of spaces and punctuation at its ends. Every piece with three letters or
// digits must occur in a string literal of a non-test .go file (literals
// joined with + count as one), where a fmt verb (%s, %d, %q …) may stand for
// one word of the piece (a value the doc spells out, such as the 16 in
// "holds data at 16 MiB"), and three of the piece's letters or digits must
// come from the literal's own text.

// commands are the programs a code span of troubleshooting.md may start
// with: such a span is a command line to run, not a quoted message.
var commands = []string{"aws", "blkdiscard", "cat", "Clear-Disk", "cryptsetup", "dd", "e2fsck", "findmnt",
	"helm", "kubectl", "ls", "lsblk", "make", "xfs_repair"}

// othersMessage is a message the docs quote that another component writes.
type othersMessage struct {
	text   string // how the docs start it
	source string // who writes it
}

// othersMessages are the quoted messages of troubleshooting.md that
// Diskplane does not write: a span starting with one of them is not
// checked against the code. Each entry must be quoted somewhere.
var othersMessages = []othersMessage{
	{"AttachVolume.Attach failed for volume", "the kubelet's event"},
	{"timed out waiting for external-attacher", "the kubelet"},
	{"ATTACHED false", "kubectl get volumeattachment's columns"},
	{"Attach Error", "kubectl describe volumeattachment"},
	{"Detach Error", "kubectl describe volumeattachment"},
	{"Multi-Attach error for volume", "the attach/detach controller"},
	{"MountVolume.MountDevice failed for volume", "the kubelet"},
	{"MountVolume.SetUp failed", "the kubelet"},
	{"driver name ebs.csi.diskplane.io not found in the list of registered CSI drivers", "the kubelet"},
	{"driver … not found", "the kubelet (short for the line above)"},
	{"0/N nodes are available:", "the scheduler"},
	{"node(s) had volume node affinity conflict", "the scheduler"},
	{"UnauthorizedOperation: You are not authorized to perform this operation.", "EC2"},
	{`failed to provision volume with StorageClass "…":`, "external-provisioner, with the driver's answer after it"},
}

// grpcAnswer is how a gRPC client prints a status.
var grpcAnswer = regexp.MustCompile(`^rpc error: code = \S+ desc = `)

// settingKey is a span's first word when the span is a setting (`volumeBindingMode: Immediate`).
var settingKey = regexp.MustCompile(`^[a-z][\w./-]*:$`)

// assignment is a key=value in a span (`dd if=/dev/zero`); " = " with
// spaces, as in gRPC's "code = X", is not one.
var assignment = regexp.MustCompile(`\S=\S`)

// placeholder is a variable part written as <name>.
var placeholder = regexp.MustCompile(`<[^>]*>`)

// codeNames are the names of gRPC's status codes but OK.
func codeNames() []string {
	var names []string
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		names = append(names, c.String())
	}
	return names
}

// quotedMessage is a message a page quotes.
type quotedMessage struct {
	page string
	line int
	text string // the span, as the page has it
}

// quotedMessages returns the quoted messages of a page's blocks (see the
// convention above); troubleshooting says whether the page is
// docs/troubleshooting.md.
func quotedMessages(page string, blocks []testutil.Block, troubleshooting bool) []quotedMessage {
	names := codeNames()
	var out []quotedMessage
	for _, b := range blocks {
		if b.Kind == testutil.CodeLine {
			continue
		}
		for _, span := range testutil.CodeSpans(b.Text) {
			fields := strings.Fields(span)
			if len(fields) < 2 {
				continue
			}
			answer := slices.Contains(names, fields[0])
			message := troubleshooting && !slices.Contains(commands, fields[0]) && !strings.HasPrefix(fields[0], "-") &&
				!strings.Contains(span, "{") && !assignment.MatchString(span) && !settingKey.MatchString(fields[0])
			if answer || message {
				out = append(out, quotedMessage{page: page, line: b.Line, text: span})
			}
		}
	}
	return out
}

// ownPart returns the part of a quoted message Diskplane writes: the whole
// message, or for another component's message (others) the driver's answer
// inside it, or "" for none. used records which entries of others matched.
func ownPart(msg string, others []othersMessage, used map[string]bool) string {
	for _, o := range others {
		if !strings.HasPrefix(msg, o.text) {
			continue
		}
		used[o.text] = true
		if i := strings.Index(msg, "rpc error: code = "); i >= 0 {
			return msg[i:]
		}
		return ""
	}
	return msg
}

// messagePieces cuts the part of a quoted message the code writes into the
// pieces that must occur in the code (see the convention above).
func messagePieces(msg string) []string {
	msg = grpcAnswer.ReplaceAllString(msg, "")
	if first, rest, ok := strings.Cut(msg, " "); ok && slices.Contains(codeNames(), first) {
		msg = rest
	}
	var pieces, run []string
	flush := func() {
		for _, p := range strings.Split(strings.Join(run, " "), ": ") {
			p = strings.TrimFunc(p, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune(`.,;:()"'`, r) })
			if alnum(p) >= 3 {
				pieces = append(pieces, p)
			}
		}
		run = nil
	}
	for _, w := range strings.Fields(msg) {
		if strings.Contains(w, "…") || strings.Contains(w, "...") || placeholder.MatchString(w) {
			flush()
			continue
		}
		run = append(run, w)
	}
	flush()
	return pieces
}

// alnum counts the ASCII letters and digits of s.
func alnum(s string) int {
	n := 0
	for i := range len(s) {
		if isAlnum(s[i]) {
			n++
		}
	}
	return n
}

func isAlnum(c byte) bool { return c < 0x80 && (unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c))) }

// formatVerb is one fmt verb in a literal, or the escaped %%.
var formatVerb = regexp.MustCompile(`%(?:%|[-+# 0]*(?:\[\d+\])?(?:\d+|\*)?(?:\.(?:\d+|\*)?)?(?:\[\d+\])?[a-zA-Z])`)

// pattern is a string literal with its fmt verbs marked: text[i] is a byte
// of the literal's own text unless verb[i].
type pattern struct {
	text []byte
	verb []bool
}

func newPattern(lit string) pattern {
	var p pattern
	add := func(s string) {
		p.text = append(p.text, s...)
		p.verb = append(p.verb, make([]bool, len(s))...)
	}
	last := 0
	for _, m := range formatVerb.FindAllStringIndex(lit, -1) {
		add(lit[last:m[0]])
		if lit[m[0]:m[1]] == "%%" {
			add("%")
		} else {
			p.text = append(p.text, 0)
			p.verb = append(p.verb, true)
		}
		last = m[1]
	}
	add(lit[last:])
	return p
}

// holds reports whether piece can be part of what the literal formats to:
// its bytes match the literal's own text in order, a verb standing for a
// run of the piece without spaces (possibly empty), and at least three of
// the piece's letters or digits match the literal's own text.
func (p pattern) holds(piece string) bool {
	const need = 3
	n, m := len(piece), len(p.text)
	memo := make([]int8, (n+1)*(m+1)*(need+1))
	var match func(i, j, k int) bool
	match = func(i, j, k int) bool {
		if i == n {
			return k >= need
		}
		if j == m {
			return false
		}
		key := (i*(m+1)+j)*(need+1) + k
		if memo[key] != 0 {
			return memo[key] > 0
		}
		ok := false
		switch {
		case p.verb[j]:
			for e := i; e <= n && !ok; e++ {
				ok = match(e, j+1, k)
				if e < n && piece[e] == ' ' {
					break
				}
			}
		case piece[i] == p.text[j]:
			next := k
			if isAlnum(piece[i]) && next < need {
				next++
			}
			ok = match(i+1, j+1, next)
		}
		memo[key] = -1
		if ok {
			memo[key] = 1
		}
		return ok
	}
	for j := range m {
		if match(0, j, 0) {
			return true
		}
	}
	return false
}

// words returns the runs of three or more ASCII letters or digits of s.
func words(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r >= 0x80 || !isAlnum(byte(r)) })
}

// literals are the string literals of the code, and can say whether a
// piece of a quoted message is in one of them.
type literals []string

// hold reports whether one of the literals holds piece (see pattern.holds).
func (ls literals) hold(piece string) bool {
	for _, l := range ls {
		if strings.Contains(l, piece) {
			return true
		}
	}
	ws := slices.DeleteFunc(words(piece), func(w string) bool { return len(w) < 3 })
	for _, l := range ls {
		if slices.ContainsFunc(ws, func(w string) bool { return strings.Contains(l, w) }) && newPattern(l).holds(piece) {
			return true
		}
	}
	return false
}

// codeLiterals reads the string literals of every non-test .go file under
// root, leaving out tests/, testdata and _output. Literals joined with +
// are one.
func codeLiterals(t *testing.T, root string) literals {
	t.Helper()
	var out literals
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "_output" || name == "testdata" ||
				path == filepath.Join(root, "tests")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out = append(out, fileLiterals(src)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 1000 {
		t.Fatalf("found only %d string literals under %s", len(out), root)
	}
	return out
}

// fileLiterals returns the string literals of one Go source file.
func fileLiterals(src []byte) []string {
	var s scanner.Scanner
	fset := token.NewFileSet()
	s.Init(fset.AddFile("", fset.Base(), len(src)), src, nil, 0)
	var out []string
	prev, join := token.ILLEGAL, false
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			return out
		}
		switch tok {
		case token.STRING:
			v, err := strconv.Unquote(lit)
			if err != nil {
				break
			}
			if join {
				out[len(out)-1] += v
			} else {
				out = append(out, v)
			}
		case token.ADD:
			join = prev == token.STRING
		}
		if tok != token.ADD {
			join = false
		}
		prev = tok
	}
}

// unemitted returns, for each piece of msg that the code holds nowhere, a
// sentence saying so.
func unemitted(msg string, code literals, used map[string]bool) []string {
	var out []string
	for _, p := range messagePieces(ownPart(msg, othersMessages, used)) {
		if !code.hold(p) {
			out = append(out, fmt.Sprintf("%q is in no string literal of the code", p))
		}
	}
	return out
}

// TestQuotedMessagesAreEmitted fails for every message the docs quote (see
// the convention above) that the code cannot emit, and for every entry of
// othersMessages that no page quotes any more.
func TestQuotedMessagesAreEmitted(t *testing.T) {
	code := codeLiterals(t, repoRoot)
	used := map[string]bool{}
	checked := 0
	for _, path := range pages(t) {
		page := pageName(path)
		for _, q := range quotedMessages(page, testutil.DocBlocks(t, path), page == "docs/troubleshooting.md") {
			checked++
			for _, why := range unemitted(q.text, code, used) {
				t.Errorf("%s:%d quotes `%s`, but %s: quote what the code writes, with … for its variable parts, "+
					"or, if another component writes it, add it to othersMessages with its source", q.page, q.line, q.text, why)
			}
		}
	}
	if checked < 50 {
		t.Errorf("found only %d quoted messages: has the convention changed?", checked)
	}
	for _, o := range othersMessages {
		if !used[o.text] {
			t.Errorf("othersMessages lists %q (%s), which no page quotes any more: remove it", o.text, o.source)
		}
	}
}

// TestQuotedMessageCheck proves the check on made-up messages and code: a
// message the code writes passes, one it does not write fails.
func TestQuotedMessageCheck(t *testing.T) {
	code := literals{
		"volume %s is still attached to node %s",
		"EC2 %s: %w",
		"holds data at %d MiB, where its LUKS2 data would begin",
		"Attaching volume",
		"%s %s",
		"Volume made with this client token is lost; " + "the next attempt makes a new one",
	}
	tests := []struct {
		msg  string
		want int // pieces the code does not hold
	}{
		{"FailedPrecondition … volume vol-… is still attached to node i-…", 0},
		{"rpc error: code = FailedPrecondition desc = volume vol-1 is still attached to node i-2", 0},
		{"EC2 AttachVolume: AttachmentLimitExceeded: …", 1},
		{"FailedPrecondition … holds data at 16 MiB, where its LUKS2 data would begin", 0},
		{"Attaching volume", 0},
		{"Volume made with this client token is lost; the next attempt makes a new one", 0},
		{"Client token already used with other parameters; trying the next one", 1},
		{"all 10 client tokens are spent", 1},
		{"FailedPrecondition … is still attached to instance i-…", 1},
		{"Unavailable … where the kubelet puts it cannot be told", 1},
		{"two words", 1}, // "%s %s" may not stand for a message of values alone
		{"UnauthorizedOperation: You are not authorized to perform this operation. Encoded authorization failure message: …", 0},
		{`failed to provision volume with StorageClass "…": rpc error: code = PermissionDenied desc = volume vol-… is still attached to node …`, 0},
		{`failed to provision volume with StorageClass "…": rpc error: code = PermissionDenied desc = volume is gone`, 1},
	}
	for _, tc := range tests {
		t.Run(tc.msg, func(t *testing.T) {
			if got := unemitted(tc.msg, code, map[string]bool{}); len(got) != tc.want {
				t.Fatalf("unemitted(%q) = %q, want %d of them", tc.msg, got, tc.want)
			}
		})
	}
}

// TestQuotedMessagesFound proves which code spans count as quoted messages.
func TestQuotedMessagesFound(t *testing.T) {
	const page = "Run `kubectl describe pod NAME`; set `volumeBindingMode: Immediate`; see `Volume is abnormal`,\n" +
		"`NotFound … node i-…`, `code!=\"OK\"` and `Aborted`.\n\n```sh\necho `not this`\n```\n"
	tests := []struct {
		troubleshooting bool
		want            []string
	}{
		{troubleshooting: true, want: []string{"Volume is abnormal", "NotFound … node i-…"}},
		{troubleshooting: false, want: []string{"NotFound … node i-…"}},
	}
	for _, tc := range tests {
		var got []string
		for _, q := range quotedMessages("p.md", testutil.MarkdownBlocks(page), tc.troubleshooting) {
			got = append(got, q.text)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("quotedMessages(troubleshooting=%v) = %q, want %q", tc.troubleshooting, got, tc.want)
		}
	}
}

// TestFileLiterals proves that literals joined with + are read as one.
func TestFileLiterals(t *testing.T) {
	src := "package p\nvar a = \"one \" +\n\t`two`\nvar b = \"x\" + y + \"z\"\nconst c = 'q'\n"
	want := []string{"one two", "x", "z"}
	if got := fileLiterals([]byte(src)); !slices.Equal(got, want) {
		t.Fatalf("fileLiterals = %q, want %q", got, want)
	}
}
