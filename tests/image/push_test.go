// Package image tests the scripts a user runs to get Diskplane's image onto a
// real cluster (hack/image): make push's refusal of a bad image name before
// anything is built; a real push, with buildah from the build storage as
// make image fills it, to a registry (go-containerregistry's in-memory one:
// no other registry is reachable from the development machines); and the
// Debian mirror the image is built from, which is this machine's apt's.
package image

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/testutil"
)

var repoRoot = func() string {
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return dir
}()

var pushScript = filepath.Join(repoRoot, "hack", "image", "push.sh")

// environ is this process's environment without the variables the image
// scripts read, plus extra.
func environ(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "IMAGE", "TLS_VERIFY", "IMAGE_STORAGE", "IMAGE_RUNROOT", "PUBLIC_BASES", "MAKEFLAGS", "MAKELEVEL":
		default:
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// run runs a command and returns its exit code and combined output.
func run(t *testing.T, env []string, name string, args ...string) (int, string) {
	t.Helper()
	// Not t.Context(): cleanups run commands too, after it is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = repoRoot
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	default:
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		return 0, ""
	}
}

// TestPushRefusesBadArguments checks that push.sh refuses what it cannot
// push, with exit code 2 and a message saying what to give, before it
// builds anything or asks for root: a build takes minutes, and a name
// without a registry would go to Docker Hub.
func TestPushRefusesBadArguments(t *testing.T) {
	// A refused image name is answered with the form to give, too.
	const form = "give IMAGE=<registry>/<name>:<tag>"
	tests := []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{name: "no image", want: []string{"no image name given", form}},
		{name: "no registry", env: []string{"IMAGE=diskplane:v0.1.0"}, want: []string{"names no registry", form}},
		{name: "Docker Hub style name", env: []string{"IMAGE=storage/diskplane:v0.1.0"}, want: []string{"names no registry", form}},
		{name: "no tag", env: []string{"IMAGE=registry.example.com/storage/diskplane"}, want: []string{"has no tag", form}},
		{name: "no tag after a port", env: []string{"IMAGE=127.0.0.1:5000/diskplane"}, want: []string{"has no tag", form}},
		{name: "digest", env: []string{"IMAGE=registry.example.com/diskplane@sha256:0123"}, want: []string{"a digest cannot be pushed to", form}},
		{name: "upper-case repository", env: []string{"IMAGE=registry.example.com/Storage/diskplane:v1"}, want: []string{"repository Storage/diskplane is not valid", form}},
		{name: "bad tag", env: []string{"IMAGE=registry.example.com/diskplane:-v1"}, want: []string{"tag -v1 is not valid", form}},
		{name: "bad TLS_VERIFY", env: []string{"IMAGE=registry.example.com/diskplane:v1", "TLS_VERIFY=no"}, want: []string{"TLS_VERIFY=no: want true or false"}},
		{name: "unknown argument", args: []string{"--fast"}, env: []string{"IMAGE=registry.example.com/diskplane:v1"}, want: []string{"unknown argument --fast", "make push IMAGE="}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out := run(t, environ(tc.env...), pushScript, tc.args...)
			if code != 2 {
				t.Fatalf("push.sh %v with %v = %d, want 2:\n%s", tc.args, tc.env, code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Fatalf("push.sh %v with %v says no %q:\n%s", tc.args, tc.env, w, out)
				}
			}
		})
	}
	t.Run("make push without IMAGE", func(t *testing.T) {
		code, out := run(t, environ(), "make", "--no-print-directory", "push")
		if code == 0 || !strings.Contains(out, "no image name given") {
			t.Fatalf("make push without IMAGE = %d:\n%s", code, out)
		}
	})
	t.Run("help", func(t *testing.T) {
		code, out := run(t, environ(), pushScript, "--help")
		if code != 0 || !strings.Contains(out, "make push IMAGE=<registry>/<name>:<tag>") {
			t.Fatalf("push.sh --help = %d:\n%s", code, out)
		}
	})
}

// buildIndex is the image index make image leaves in the build storage for
// make push (hack/image/lib.sh's img_build_index).
const buildIndex = "localhost/diskplane-build/diskplane:index"

// TestPushToRegistry pushes an image index from a build storage of its own,
// as make push --no-build does after make image, to a registry over plain
// HTTP, and checks that the registry serves the index push.sh reported,
// listing linux/amd64 and linux/arm64.
func TestPushToRegistry(t *testing.T) {
	testutil.RequireRoot(t, "buildah")
	addr := startRegistry(t)
	storage, runroot := filepath.Join(t.TempDir(), "storage"), filepath.Join(t.TempDir(), "run")
	bah := func(args ...string) string {
		t.Helper()
		args = append([]string{"--root", storage, "--runroot", runroot, "--storage-driver", "overlay"}, args...)
		code, out := run(t, environ(), "buildah", args...)
		if code != 0 {
			t.Fatalf("buildah %v = %d:\n%s", args, code, out)
		}
		return strings.TrimSpace(out)
	}
	t.Cleanup(func() {
		// Leave nothing mounted in the temporary directory it removes next.
		_, _ = run(t, environ(), "buildah", "--root", storage, "--runroot", runroot, "--storage-driver", "overlay", "rmi", "--all", "--force")
		_, _ = run(t, environ(), "umount", filepath.Join(storage, "overlay"))
	})
	env := environ("IMAGE_STORAGE="+storage, "IMAGE_RUNROOT="+runroot, "TLS_VERIFY=false")

	image := addr + "/storage/diskplane:v0.0.0-test"
	code, out := run(t, append(env, "IMAGE="+image), pushScript, "--no-build")
	if code == 0 || !strings.Contains(out, "holds no image index") {
		t.Fatalf("push.sh --no-build of an image never built = %d:\n%s", code, out)
	}

	// One-file images stand in for make image's: what is pushed, and how,
	// does not depend on the content.
	bah("manifest", "create", buildIndex)
	for _, arch := range []string{"amd64", "arm64"} {
		file := filepath.Join(t.TempDir(), "hello")
		if err := os.WriteFile(file, []byte("diskplane push test "+arch+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		ctr := bah("from", "scratch")
		bah("copy", ctr, file, "/hello")
		bah("config", "--os", "linux", "--arch", arch, ctr)
		// Named, as make image names them: the scripts prune untagged images.
		id := bah("commit", "--quiet", "--rm", ctr, "localhost/diskplane-build/diskplane:linux-"+arch)
		bah("manifest", "add", buildIndex, id)
	}

	code, out = run(t, append(env, "IMAGE="+image), pushScript, "--no-build")
	if code != 0 {
		t.Fatalf("push.sh --no-build = %d:\n%s", code, out)
	}
	m := regexp.MustCompile(`pushed ` + regexp.QuoteMeta(image) + `@(sha256:[0-9a-f]{64})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("push.sh did not report the pushed digest:\n%s", out)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/v2/storage/diskplane/manifests/v0.0.0-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := resp.Header.Get("Docker-Content-Digest"); resp.StatusCode != http.StatusOK || got != m[1] {
		t.Fatalf("the registry answers %s with digest %q for the pushed tag, want 200 and %s", resp.Status, got, m[1])
	}
	var index struct {
		MediaType string `json:"mediaType"`
		Manifests []struct {
			Platform struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&index); err != nil {
		t.Fatal(err)
	}
	// The index make image writes as an OCI archive (and make release pins
	// in its chart) has the digest the registry got.
	archive := filepath.Join(t.TempDir(), "index.oci.tar")
	bah("manifest", "push", "--quiet", "--all", "--format", "oci", buildIndex, "oci-archive:"+archive+":"+image)
	code, out = run(t, environ(), "tar", "-xOf", archive, "index.json")
	if code != 0 || !strings.Contains(out, `"digest":"`+m[1]+`"`) {
		t.Errorf("the index written as an OCI archive is not the one pushed (%s):\n%s", m[1], out)
	}
	var platforms []string
	for _, p := range index.Manifests {
		platforms = append(platforms, p.Platform.OS+"/"+p.Platform.Architecture)
	}
	slices.Sort(platforms)
	if index.MediaType != "application/vnd.oci.image.index.v1+json" || !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Fatalf("the registry serves a %q listing %v, want an OCI image index of linux/amd64 and linux/arm64", index.MediaType, platforms)
	}
}

// startRegistry runs the pinned in-memory registry (hack/image/registry.sh
// builds it once) on a free loopback port until the test ends, and returns
// its host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	code, out := run(t, environ(), filepath.Join(repoRoot, "hack", "image", "registry.sh"))
	if code != 0 {
		t.Fatalf("hack/image/registry.sh = %d:\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	cmd := exec.Command(lines[len(lines)-1], "-port", "0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		served := regexp.MustCompile(`serving on port (\d+)`)
		for sc.Scan() {
			if m := served.FindStringSubmatch(sc.Text()); m != nil {
				port <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case p := <-port:
		return fmt.Sprintf("127.0.0.1:%s", p)
	case <-time.After(30 * time.Second):
		t.Fatal("the registry did not say where it listens within 30 s")
		return ""
	}
}
