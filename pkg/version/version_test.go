package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakefileStampsEveryField builds a small program with the -X flags the
// Makefile's build targets use and checks each value arrives. It fails when
// a variable here is renamed or moved (the linker silently ignores -X for a
// symbol that does not exist, and every release would report v0.0.0-dev) or
// when the Makefile stops stamping one of them.
func TestMakefileStampsEveryField(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	pkg := regexp.MustCompile(`(?m)^PKG\s*:=\s*(\S+)`).FindSubmatch(makefile)
	if pkg == nil {
		t.Fatal("the Makefile defines no PKG")
	}
	const importPath = "github.com/diskplane/diskplane/pkg/version"
	if got := string(pkg[1]) + "/pkg/version"; got != importPath {
		t.Fatalf("the Makefile stamps %s, want %s", got, importPath)
	}

	values := map[string]string{"version": "v9.8.7-test", "commit": "0123abcd", "buildDate": "2030-01-02T03:04:05Z"}
	var ldflags []string
	for _, m := range regexp.MustCompile(`-X \$\(PKG\)/pkg/version\.(\w+)=`).FindAllSubmatch(makefile, -1) {
		name := string(m[1])
		value, ok := values[name]
		if !ok {
			t.Fatalf("the Makefile stamps version.%s, which this test does not know", name)
		}
		ldflags = append(ldflags, "-X", importPath+"."+name+"="+value)
	}
	if len(ldflags) != 2*len(values) {
		t.Fatalf("the Makefile stamps %v, want version, commit and buildDate", ldflags)
	}

	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build with -ldflags: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "stamped")
	build := exec.Command(goTool, "build", "-ldflags", strings.Join(ldflags, " "), "-o", bin, "./testdata/stamped")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{values["version"], values["version"], values["commit"], values["buildDate"]}, "|")
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("stamped build reports %q, want %q", got, want)
	}
}
