package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The repository's Windows Dockerfile, which winimage applies.
const repoDockerfile = "../../../Dockerfile.windows"

func TestReadStageOfTheRepositorysDockerfile(t *testing.T) {
	f, err := os.Open(repoDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := readStage(f, "hostprocess", buildArgs{"VERSION": "v1.2.3", "COMMIT": "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	if st.labels["org.opencontainers.image.version"] != "v1.2.3" || st.labels["org.opencontainers.image.licenses"] != "Apache-2.0" || len(st.labels) != 5 {
		t.Errorf("labels %v", st.labels)
	}
	want := []copyFrom{{from: "builder", src: "/src/_output/bin/windows-amd64/diskplane.exe", dest: "/diskplane.exe"}}
	if !slices.Equal(st.copies, want) || !slices.Equal(st.entrypoint, []string{"diskplane.exe"}) || st.user != "" {
		t.Errorf("copies %v entrypoint %q user %q", st.copies, st.entrypoint, st.user)
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	nano, err := readStage(f, "nanoserver", nil)
	if err != nil {
		t.Fatal(err)
	}
	if nano.user != "ContainerAdministrator" || nano.labels["org.opencontainers.image.version"] != "v0.0.0-dev" {
		t.Errorf("nanoserver: user %q, labels %v (the ARG's default is the version)", nano.user, nano.labels)
	}
}

func TestReadStageRefuses(t *testing.T) {
	for name, df := range map[string]string{
		"no such stage":               "FROM a AS other\nCOPY --from=builder /src/x /x\n",
		"a RUN":                       "FROM a AS hostprocess\nRUN echo\n",
		"an ENV":                      "FROM a AS hostprocess\nENV A=b\n",
		"a COPY from the context":     "FROM a AS hostprocess\nCOPY x /x\n",
		"a COPY with more flags":      "FROM a AS hostprocess\nCOPY --from=builder --chown=1 /src/x /x\n",
		"an ENTRYPOINT in shell form": "FROM a AS hostprocess\nENTRYPOINT x.exe\n",
		"a label of an unknown ARG":   "FROM a AS hostprocess\nLABEL v=\"${NOPE}\"\n",
		"an unterminated quote":       "FROM a AS hostprocess\nLABEL v=\"x\n",
		"a label without value":       "FROM a AS hostprocess\nLABEL v\n",
	} {
		if _, err := readStage(strings.NewReader(df), "hostprocess", nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestReadStageStopsAtTheNextStage(t *testing.T) {
	df := "# comment\nARG X=1\nFROM --platform=linux/amd64 a AS hostprocess\nARG X=2\nLABEL a=\"$X\" \\\n  # inside\n  b=${X}-c\n" +
		"ENTRYPOINT [\"a.exe\", \"-v\"]\nFROM b AS next\nRUN anything\n"
	st, err := readStage(strings.NewReader(df), "hostprocess", buildArgs{"X": "3"})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(st.labels, map[string]string{"a": "3", "b": "3-c"}) || !slices.Equal(st.entrypoint, []string{"a.exe", "-v"}) {
		t.Errorf("labels %v entrypoint %q", st.labels, st.entrypoint)
	}
}

func TestKeyValues(t *testing.T) {
	got, err := keyValues(`a="x \"y\" \\z" b=plain  c`, true)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"a", `x "y" \z`}, {"b", "plain"}, {"c", ""}}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := keyValues("c", false); err == nil {
		t.Error("a bare key was accepted where a value is needed")
	}
}

func TestDestination(t *testing.T) {
	for _, tc := range []struct{ src, dest, want string }{
		{"/src/a/x.exe", "/x.exe", "x.exe"},
		{"/src/a/x.exe", "/bin/", "bin/x.exe"},
		{"/src/a/x.exe", "/bin/../y.exe", "y.exe"},
	} {
		if got, err := destination(tc.src, tc.dest); err != nil || got != tc.want {
			t.Errorf("destination(%q, %q) = %q, %v; want %q", tc.src, tc.dest, got, err, tc.want)
		}
	}
	if _, err := destination("/src/x", "x.exe"); err == nil {
		t.Error("a relative destination was accepted")
	}
}

func TestImageTime(t *testing.T) {
	got, err := imageTime("", "1700000000")
	if err != nil || !got.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("from SOURCE_DATE_EPOCH: %v, %v", got, err)
	}
	got, err = imageTime("2026-01-02T03:04:05Z", "1")
	if err != nil || got.Year() != 2026 {
		t.Errorf("-created first: %v, %v", got, err)
	}
	for _, epoch := range []string{"", "yesterday"} {
		if _, err := imageTime("", epoch); err == nil {
			t.Errorf("SOURCE_DATE_EPOCH %q accepted", epoch)
		}
	}
}

// TestRun builds an image from a Dockerfile and a build context of the
// test's own, twice: the same inputs give the same archive.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	ctx := filepath.Join(dir, "ctx")
	if err := os.MkdirAll(filepath.Join(ctx, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "out", "p.exe"), []byte("MZ"), 0o755); err != nil {
		t.Fatal(err)
	}
	df := filepath.Join(dir, "Dockerfile")
	content := "FROM base AS hostprocess\nARG VERSION\nLABEL v=\"${VERSION}\"\nCOPY --from=builder /src/out/p.exe /p.exe\nENTRYPOINT [\"p.exe\"]\n"
	if err := os.WriteFile(df, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var archives [][]byte
	for i := range 2 {
		out := filepath.Join(dir, "img", "a.tar")
		if err := run(df, "hostprocess", ctx, "/src", "example.com/p:v1", out, buildArgs{"VERSION": "v1"}, when); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, b)
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Error("two runs on the same inputs wrote different archives")
	}
	if err := run(df, "hostprocess", filepath.Join(dir, "empty"), "/src", "example.com/p:v1", filepath.Join(dir, "b.tar"), nil, when); err == nil {
		t.Error("an image was written without the binary the stage copies")
	}
}
