// Package images checks the image build files against the build they
// wrap: each Dockerfile's builder stage runs a make target, and every file
// its image stages copy from that stage must be one the target produces,
// and the entrypoint must be what was copied. An image that would copy a
// path the build no longer writes fails here, not on an image builder.
package images

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository, seen from this package.
const repoRoot = "../.."

// builderDir is where the builder stages put the repository (WORKDIR).
const builderDir = "/src"

// buildVersion is the version the test's builds stamp in.
const buildVersion = "v0.0.0-imagestest"

// stage is one FROM … AS name of a Dockerfile, with what it does.
type stage struct {
	name       string
	runs       []string
	copies     map[string]string // destination in the image -> source in the builder
	entrypoint string
	entryJSON  []string          // the ENTRYPOINT's exec form
	labels     map[string]string // as written, before ARG expansion
	user       string
	args       map[string]bool // the ARGs it declares
	refs       []string        // the variables its instructions but RUN use
	fromRefs   []string        // the variables its FROM line uses
	globalArgs map[string]bool // the ARGs declared before the first FROM
}

var (
	fromLine       = regexp.MustCompile(`^FROM\s+\S+(?:\s+\S+)*?\s+AS\s+(\S+)$`)
	copyLine       = regexp.MustCompile(`^COPY\s+--from=builder\s+(\S+)\s+(\S+)$`)
	entrypointLine = regexp.MustCompile(`^ENTRYPOINT\s+\["([^"]+)"`)
	labelPair      = regexp.MustCompile(`(\S+?)="([^"]*)"`)
	argLine        = regexp.MustCompile(`^ARG\s+([A-Za-z_][A-Za-z0-9_]*)`)
	varUse         = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)
)

// parse reads the stages of a Dockerfile; continuation lines are joined.
func parse(t *testing.T, file string) []*stage {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []*stage
	var line string
	globals := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, `\`) {
			line += strings.TrimSuffix(l, `\`) + " "
			continue
		}
		line, l = "", line+l
		if strings.HasPrefix(l, "FROM ") {
			name := ""
			if m := fromLine.FindStringSubmatch(l); m != nil {
				name = m[1]
			}
			st := &stage{name: name, copies: map[string]string{}, labels: map[string]string{}, args: map[string]bool{}, globalArgs: globals}
			for _, m := range varUse.FindAllStringSubmatch(l, -1) {
				st.fromRefs = append(st.fromRefs, m[1])
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if m := argLine.FindStringSubmatch(l); m != nil {
				globals[m[1]] = true
			}
			continue
		}
		s := stages[len(stages)-1]
		// A RUN line's variables are the shell's to expand (its own, or the
		// ARGs as environment variables).
		if !strings.HasPrefix(l, "RUN ") {
			for _, m := range varUse.FindAllStringSubmatch(l, -1) {
				s.refs = append(s.refs, m[1])
			}
		}
		switch {
		case strings.HasPrefix(l, "RUN "):
			s.runs = append(s.runs, strings.TrimPrefix(l, "RUN "))
		case copyLine.MatchString(l):
			m := copyLine.FindStringSubmatch(l)
			s.copies[m[2]] = m[1]
		case entrypointLine.MatchString(l):
			s.entrypoint = entrypointLine.FindStringSubmatch(l)[1]
			if err := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(l, "ENTRYPOINT"))), &s.entryJSON); err != nil {
				t.Fatalf("%s: %s: %v", file, l, err)
			}
		case strings.HasPrefix(l, "LABEL "):
			for _, m := range labelPair.FindAllStringSubmatch(l, -1) {
				s.labels[m[1]] = m[2]
			}
		case strings.HasPrefix(l, "USER "):
			s.user = strings.TrimSpace(strings.TrimPrefix(l, "USER "))
		case argLine.MatchString(l):
			s.args[argLine.FindStringSubmatch(l)[1]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

func TestDockerfilesCopyWhatTheBuildMakes(t *testing.T) {
	tests := []struct {
		file   string
		target string
		// images are the stages that are images (one each: the copies).
		images []string
	}{
		{file: "Dockerfile", target: "build", images: []string{""}},
		{file: "Dockerfile.windows", target: "build-windows", images: []string{"hostprocess", "nanoserver"}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			stages := parse(t, tc.file)
			var builder *stage
			for _, s := range stages {
				if s.name == "builder" {
					builder = s
				}
			}
			if builder == nil {
				t.Fatalf("%s has no builder stage", tc.file)
			}
			ran := false
			for _, r := range builder.runs {
				ran = ran || strings.HasPrefix(r, "make "+tc.target+" ")
			}
			if !ran {
				t.Fatalf("the builder stage does not run make %s: %q", tc.target, builder.runs)
			}
			// What the target makes, in a private output directory.
			out := t.TempDir()
			build := exec.Command("make", tc.target, "OUTPUT="+out, "VERSION="+buildVersion)
			build.Dir = repoRoot
			if b, err := build.CombinedOutput(); err != nil {
				t.Fatalf("make %s: %v\n%s", tc.target, err, b)
			}
			for _, name := range tc.images {
				var img *stage
				for _, s := range stages[1:] {
					if s.name == name || name == "" && s != builder {
						img = s
					}
				}
				if img == nil {
					t.Fatalf("%s has no stage %q", tc.file, name)
				}
				if len(img.copies) == 0 {
					t.Errorf("stage %q copies nothing from the builder", name)
				}
				for dest, src := range img.copies {
					rel, ok := strings.CutPrefix(src, builderDir+"/_output/")
					if !ok {
						t.Errorf("stage %q copies %s, which is not build output", name, src)
						continue
					}
					if fi, err := os.Stat(filepath.Join(out, filepath.FromSlash(rel))); err != nil || !fi.Mode().IsRegular() {
						t.Errorf("stage %q copies %s, which make %s does not make (%v)", name, src, tc.target, err)
					}
					if path.Base(img.entrypoint) != path.Base(dest) {
						t.Errorf("stage %q runs %q, not what it copied (%s)", name, img.entrypoint, dest)
					}
					if strings.HasSuffix(dest, ".exe") {
						exe, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(rel)))
						if err == nil {
							err = checkWindowsBinary(exe, buildVersion)
						}
						if err != nil {
							t.Errorf("stage %q copies %s: %v", name, src, err)
						}
					}
				}
			}
		})
	}
}
