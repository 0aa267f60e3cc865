//go:build linux && wine

package windows

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/csiproxy"
	"github.com/diskplane/diskplane/pkg/emulator/csiproxyapi"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/winhost"
	"github.com/diskplane/diskplane/pkg/filetree"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// repoRoot is the repository, seen from this package.
const repoRoot = "../.."

var (
	// winePrefix is the prefix hack/wine/setup.sh makes.
	winePrefix = func() string {
		if p := os.Getenv("WINEPREFIX"); p != "" {
			return p
		}
		p, _ := filepath.Abs(filepath.Join(repoRoot, "_output", "wine", "prefix"))
		return p
	}()
	// wineRun runs a Windows program under Wine in that prefix.
	wineRun, _ = filepath.Abs(filepath.Join(repoRoot, "hack", "wine", "go_windows_amd64_exec"))
	// exeDir holds diskplane.exe and csi-proxy-emulator.exe, built by
	// TestMain from this tree.
	exeDir string
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "diskplane-windows-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer filetree.Remove(dir)
		build := exec.Command("go", "build", "-o", dir+"/", "./cmd/diskplane", "./cmd/csi-proxy-emulator")
		build.Dir = repoRoot
		build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build the Windows programs: %v\n%s", err, out)
			return 1
		}
		exeDir = dir
		code := m.Run()
		// Whatever Wine still runs in the prefix (nothing, if every test
		// cleaned up) goes with the test.
		stop := exec.Command("wineserver", "-k")
		stop.Env = append(os.Environ(), "WINEPREFIX="+winePrefix)
		_ = stop.Run()
		return code
	}())
}

// windowsProcess is a Windows program running under Wine.
type windowsProcess struct {
	cmd *exec.Cmd
	log string
	// exited is closed when the process has ended; err is then how.
	exited chan struct{}
	err    error
}

// startWindows starts exe (in exeDir) under Wine with args and env added
// to the test's environment; its output goes to a log file that a failing
// test prints. It is killed when the test ends.
func startWindows(t *testing.T, exe string, args, env []string) *windowsProcess {
	t.Helper()
	log, err := os.CreateTemp("", strings.TrimSuffix(exe, ".exe")+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(wineRun, append([]string{filepath.Join(exeDir, exe)}, args...)...)
	cmd.Env = append(os.Environ(), append([]string{"WINEPREFIX=" + winePrefix}, env...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &windowsProcess{cmd: cmd, log: log.Name(), exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); log.Close(); close(p.exited) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("%s output:\n%s", exe, tail(string(b), 60))
		}
		os.Remove(p.log)
	})
	return p
}

// kill kills the process, as a crash would, and waits for it.
func (p *windowsProcess) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// localPath is where a path on the Windows host's C: drive is here.
func localPath(windowsPath string) string {
	rest := strings.TrimLeft(strings.ReplaceAll(windowsPath[2:], `\`, "/"), "/")
	return filepath.Join(winePrefix, "drive_c", rest)
}

// windowsNode is the Windows side of a test: csi-proxy-emulator.exe and
// diskplane.exe --mode=node, both under Wine, over one EC2 emulator.
type windowsNode struct {
	env        *emulatortest.Env
	proxyArgs  []string
	proxyAdmin string
	proxy      *windowsProcess
	endpoint   string
	health     string
	plugin     *windowsProcess
	conn       *grpc.ClientConn
}

// startWindowsNode starts the csi-proxy emulator for env's local instance,
// answering as the csi-proxy release version, and the node plugin, and
// waits until the plugin answers.
func startWindowsNode(t *testing.T, env *emulatortest.Env, version string) *windowsNode {
	t.Helper()
	n := startCSIProxy(t, env, version)
	n.startPlugin(t)
	return n
}

// startCSIProxy starts the csi-proxy emulator for env's local instance,
// answering as the csi-proxy release version, and waits until it serves.
func startCSIProxy(t *testing.T, env *emulatortest.Env, version string) *windowsNode {
	t.Helper()
	testutil.RequireWine(t, winePrefix)
	kubelet := localPath(csiproxyapi.DefaultWorkingDir)
	if err := os.MkdirAll(kubelet, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := filetree.Remove(kubelet); err != nil {
			t.Errorf("remove the kubelet directory: %v", err)
		}
	})
	n := &windowsNode{env: env, proxyAdmin: freeAddress(t)}
	data := testutil.TempDir(t)
	n.proxyArgs = []string{"--ec2-admin=" + env.AdminURL, "--data-dir=Z:" + strings.ReplaceAll(data, "/", `\`),
		"--admin-listen=" + n.proxyAdmin, "--csi-proxy-version=" + version, "-v=2"}
	n.restartCSIProxy(t)
	return n
}

// restartCSIProxy starts the csi-proxy emulator (again: it keeps the
// host's state in its data directory) and waits until it serves.
func (n *windowsNode) restartCSIProxy(t *testing.T) {
	t.Helper()
	n.proxy = startWindows(t, "csi-proxy-emulator.exe", n.proxyArgs, nil)
	waitFor(t, "the csi-proxy emulator", func() error {
		resp, err := http.Get("http://" + n.proxyAdmin + csiproxyapi.PathHealth)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
}

// startPlugin starts diskplane.exe --mode=node on a fresh port (its
// /healthz on another) and waits until it answers NodeGetInfo.
func (n *windowsNode) startPlugin(t *testing.T) {
	t.Helper()
	addrs := freeAddresses(t, 2)
	n.endpoint, n.health = addrs[0], addrs[1]
	n.plugin = startWindows(t, "diskplane.exe", []string{"--mode=node", "--endpoint=tcp://" + n.endpoint,
		"--http-endpoint=" + n.health, "--metadata-sources=imds", "--csi-proxy-wait=20s", "-v=4"},
		[]string{"AWS_EC2_METADATA_SERVICE_ENDPOINT=" + n.env.IMDSURL})
	conn, err := grpc.NewClient(n.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	n.conn = conn
	waitFor(t, "the node plugin", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
		return err
	})
}

// cluster is the scenario's view of this node.
func (n *windowsNode) cluster(ctrl csi.ControllerServer) *cluster {
	return &cluster{
		controller: ctrl,
		node:       func() csi.NodeClient { return csi.NewNodeClient(n.conn) },
		restartNode: func(t *testing.T) {
			n.plugin.kill()
			n.startPlugin(t)
		},
		disks:   n.disks,
		setDisk: func(t *testing.T, d winhost.Disk) { must(t, n.admin(http.MethodPut, csiproxyapi.PathDisks, d)) },
		setUnopenable: func(volumeID string, on bool) error {
			return n.admin(http.MethodPost, csiproxyapi.PathFaults, csiproxyapi.Faults{Unopenable: map[string]bool{volumeID: on}})
		},
		mkdir: func(t *testing.T, path string) {
			if err := os.MkdirAll(localPath(path), 0o755); err != nil {
				t.Fatal(err)
			}
		},
		exists: func(t *testing.T, path string) bool {
			_, err := os.Lstat(localPath(path))
			return err == nil
		},
	}
}

// admin sends body to the csi-proxy emulator's admin API, which answers
// No Content.
func (n *windowsNode) admin(method, path string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(method, "http://"+n.proxyAdmin+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return nil
}

// disks asks the csi-proxy emulator what the host holds.
func (n *windowsNode) disks(t *testing.T) []winhost.DiskView {
	t.Helper()
	resp, err := http.Get("http://" + n.proxyAdmin + csiproxyapi.PathDisks)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var disks []winhost.DiskView
	if err := json.NewDecoder(resp.Body).Decode(&disks); err != nil {
		t.Fatal(err)
	}
	return disks
}

// waitFor retries check until it succeeds, for at most a minute (a cold
// Wine start takes seconds).
func waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come up: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestScenarioOverPipes runs the scenario against the real diskplane.exe,
// which reaches the (emulated) host through csi-proxy's named pipes, with
// csi-proxy answering as the oldest release Diskplane supports and as the
// newest: they differ in how MountVolume takes a path that is the volume's
// mount point already.
func TestScenarioOverPipes(t *testing.T) {
	testutil.RequireWine(t, winePrefix)
	for _, version := range []string{csiproxy.MinVersion, csiproxyapi.DefaultRelease.Version} {
		t.Run("csi-proxy "+version, func(t *testing.T) {
			env, ctrl := startCloud(t)
			n := startWindowsNode(t, env, version)
			runScenario(t, n.cluster(ctrl))
		})
	}
}

// TestRefusesToStartWithoutCSIProxy checks the start-up check: with no
// csi-proxy on the node, or one older than v1.1.0, the plugin exits with an
// error that names what is missing and the release it needs.
func TestRefusesToStartWithoutCSIProxy(t *testing.T) {
	testutil.RequireWine(t, winePrefix)
	for _, tc := range []struct {
		name, version string
		env           []string
		want          []string
	}{
		{name: "no csi-proxy", want: []string{"csi-proxy-disk-v1"}},
		{name: "csi-proxy v1.0.2", version: "v1.0.2", want: []string{"older than v1.1.0", "csi-proxy-volume-v2alpha1"}},
		// A Windows without WMI scripting (Nano Server, the csi-proxy mode's
		// image): a dependency that starts WMI when the program starts (the
		// csi-proxy v2 library's v2.0.0-alpha.2, through microsoft/wmi) would
		// make the plugin panic (exit code 2) before it could say anything.
		{name: "no csi-proxy, no WMI scripting", env: []string{"DISKPLANE_WINE_DLL_OVERRIDES=wbemdisp=d"}, want: []string{"csi-proxy-disk-v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.version != "" {
				env, _ := startCloud(t)
				startCSIProxy(t, env, tc.version)
			}
			p := startWindows(t, "diskplane.exe", []string{"--mode=node", "--endpoint=tcp://" + freeAddress(t), "--csi-proxy-wait=2s"}, tc.env)
			select {
			case <-p.exited:
				if exit, ok := p.err.(*exec.ExitError); !ok || exit.ExitCode() != 1 {
					t.Fatalf("the plugin ended with %v, want exit code 1", p.err)
				}
			case <-time.After(time.Minute):
				t.Fatal("the plugin did not stop")
			}
			log, err := os.ReadFile(p.log)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range append(tc.want, "csi-proxy does not serve what Diskplane needs", "csi-proxy "+csiproxy.MinVersion+" or later") {
				if !strings.Contains(string(log), want) {
					t.Errorf("the plugin's log does not say %q:\n%s", want, tail(string(log), 20))
				}
			}
		})
	}
}

// TestHealthzFollowsCSIProxy checks the plugin's /healthz: it fails while
// csi-proxy is gone and passes again once csi-proxy is back, with the same
// plugin process throughout, which then serves volumes again.
func TestHealthzFollowsCSIProxy(t *testing.T) {
	testutil.RequireWine(t, winePrefix)
	env, _ := startCloud(t)
	n := startWindowsNode(t, env, csiproxyapi.DefaultRelease.Version)
	healthz := func() (int, string) {
		client := http.Client{Timeout: 10 * time.Second}
		resp, err := client.Get("http://" + n.health + "/healthz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	waitHealth := func(want int) string {
		t.Helper()
		var code int
		var body string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			if code, body = healthz(); code == want {
				return body
			}
		}
		t.Fatalf("/healthz answers %d %q, want %d", code, body, want)
		return ""
	}
	waitHealth(http.StatusOK)
	n.proxy.kill()
	start := time.Now()
	body := waitHealth(http.StatusInternalServerError)
	if !strings.Contains(body, "does not answer") {
		t.Errorf("/healthz with csi-proxy gone says %q, want that it does not answer", body)
	}
	t.Logf("/healthz failed %.1f s after csi-proxy was killed: %s", time.Since(start).Seconds(), body)
	n.restartCSIProxy(t)
	start = time.Now()
	waitHealth(http.StatusOK)
	t.Logf("/healthz passed again %.1f s after csi-proxy was back", time.Since(start).Seconds())
	select {
	case <-n.plugin.exited:
		t.Fatalf("the plugin exited: %v", n.plugin.err)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := csi.NewNodeClient(n.conn).NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-0123456789abcdef0",
		VolumePath: `c:\var\lib\kubelet\pods\none\volumes\kubernetes.io~csi\pvc-x\mount`}); status.Code(err) != codes.NotFound {
		t.Errorf("NodeGetVolumeStats of a path that is not there after csi-proxy came back = %v, want NotFound", err)
	}
}
