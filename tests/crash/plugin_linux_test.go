//go:build linux

package crash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/cloud/metadata"
	"github.com/diskplane/diskplane/pkg/driver/node"
	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/pkg/testutil"
	"github.com/diskplane/diskplane/pkg/tokenplace"
)

// pluginConfigEnv names the file that makes this test binary the node
// plugin instead of running tests.
const pluginConfigEnv = "DISKPLANE_CRASH_PLUGIN"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(pluginConfigEnv); cfg != "" {
		err := servePlugin(cfg)
		fmt.Fprintln(os.Stderr, "crash harness plugin:", err)
		os.Exit(1)
	}
	// The plugins the harness starts mount in the tests' own namespace.
	code := testutil.RunInPrivateMountNamespace(m)
	if pluginBinaryPath != "" {
		_ = os.RemoveAll(filepath.Dir(pluginBinaryPath))
	}
	os.Exit(code)
}

// pluginConfig is what a plugin process is started with.
type pluginConfig struct {
	// Socket is where it serves the CSI Node service.
	Socket string `json:"socket"`
	// LinkDir is where the volumes' by-id links are.
	LinkDir string `json:"linkDir"`
}

// servePlugin is the node plugin the harness interrupts: the real node
// service over the real Linux mounter, as diskplane --mode=node builds
// them, serving CSI on a unix socket until it is killed, with no udev
// serving its cryptsetup (DM_DISABLE_UDEV), as in its container. Its LUKS2 headers
// derive with Argon2id at its least cost, a fixed one (the benchmark that
// tunes it takes seconds under the VM's emulation, and the derivation is
// not what crash consistency is about), and a volume whose key KMS wraps
// is unwrapped by a stand-in for STS and KMS that answers one fixed key:
// what those services decide is tested elsewhere, and crash consistency is
// in what the node does with the key.
func servePlugin(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cfg pluginConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	m, err := mounter.New(mounter.Options{DeviceLinkDir: cfg.LinkDir, EmulatorLoopDevices: true, DeviceWait: 2 * time.Second,
		LUKSPBKDFMemoryKiB: 8 << 10, LUKSPBKDFIterations: 4})
	if err != nil {
		return err
	}
	svc, err := node.New(node.Config{
		Metadata: func(context.Context) (*metadata.Instance, error) {
			return &metadata.Instance{ID: "i-0c0ffee0c0ffee000", Type: "m5.large", Region: "us-east-1", Zone: "us-east-1a"}, nil
		},
		Mounter:   m,
		Unwrapper: fixedKey{},
		// The harness's kubelet passes the tokens in the secrets.
		TokenPlace: tokenplace.Fixed(true),
	})
	if err != nil {
		return err
	}
	lis, err := net.Listen("unix", cfg.Socket)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	csi.RegisterNodeServer(srv, svc)
	return srv.Serve(lis)
}

// volumeKey is the key fixedKey unwraps for every volume.
var volumeKey = []byte("crash-harness volume key 256 bit")

// fixedKey stands in for STS and KMS: every unwrap answers volumeKey.
type fixedKey struct{}

func (fixedKey) Unwrap(context.Context, datakeys.UnwrapRequest) ([]byte, error) {
	return append([]byte(nil), volumeKey...), nil
}

// plugin is one node plugin process and the CSI client of its socket.
type plugin struct {
	cmd    *exec.Cmd
	conn   *grpc.ClientConn
	client csi.NodeClient
	exited chan struct{}
}

// startPlugin starts a plugin process with the shims as its PATH and waits
// until it answers. Its output goes to log.
func startPlugin(t *testing.T, s *shims, root, linkDir string, log *os.File) *plugin {
	t.Helper()
	cfg := pluginConfig{Socket: filepath.Join(root, "csi.sock"), LinkDir: linkDir}
	_ = os.Remove(cfg.Socket)
	b, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(root, "plugin.json")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pluginBinary(t))
	// DM_DISABLE_UDEV: as in the plugin's container, where no udev serves
	// libdevmapper (the container's /run is its own).
	cmd.Env = append(os.Environ(), pluginConfigEnv+"="+cfgPath, "PATH="+s.dir, "DM_DISABLE_UDEV=1")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &plugin{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	// Dial once the socket is there: a connection refused before would put
	// gRPC's reconnection into its backoff, a second and more.
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(cfg.Socket); err == nil {
			break
		}
		select {
		case <-p.exited:
			t.Fatalf("the plugin process exited at start (its log: %s)", log.Name())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the plugin made no socket in a minute")
		}
	}
	conn, err := grpc.NewClient("unix://"+cfg.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.2, MaxDelay: 100 * time.Millisecond}}))
	if err != nil {
		t.Fatal(err)
	}
	p.conn, p.client = conn, csi.NewNodeClient(conn)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.client.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("the plugin process exited at start (its log: %s)", log.Name())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugin did not answer in a minute: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var (
	pluginBinaryOnce sync.Once
	pluginBinaryPath string
	pluginBinaryErr  error
)

// pluginBinary is this test binary, copied once to a local directory: the
// node VM shares the repository over 9p without a page cache, so each start
// of the binary from there reads all of it through the emulated machine
// again (a second or more), and the harness starts plugins often.
func pluginBinary(t *testing.T) string {
	pluginBinaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "crash-plugin")
		if err != nil {
			pluginBinaryErr = err
			return
		}
		pluginBinaryPath = filepath.Join(dir, "plugin")
		pluginBinaryErr = copyExecutable(os.Args[0], pluginBinaryPath)
	})
	if pluginBinaryErr != nil {
		t.Fatalf("copy the test binary for the plugin: %v", pluginBinaryErr)
	}
	return pluginBinaryPath
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// dead reports whether the process has exited, waiting up to wait.
func (p *plugin) dead(wait time.Duration) bool {
	select {
	case <-p.exited:
		return true
	case <-time.After(wait):
		return false
	}
}

// kill stops the process with SIGKILL, as a crash or the kubelet would,
// and waits for it.
func (p *plugin) kill(t *testing.T) {
	t.Helper()
	_ = p.conn.Close()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	if !p.dead(30 * time.Second) {
		t.Fatal("the plugin did not die of SIGKILL in 30 s")
	}
}
