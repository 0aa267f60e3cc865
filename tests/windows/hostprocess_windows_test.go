package windows

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/diskplane/diskplane/pkg/cloud/metadata"
	"github.com/diskplane/diskplane/pkg/csiproxy"
	"github.com/diskplane/diskplane/pkg/driver"
	"github.com/diskplane/diskplane/pkg/driver/node"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/winhost"
	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// hostProcessNode is the node plugin as a HostProcess pod runs it: the
// csi-proxy v2 library in process, here over the host APIs of an emulated
// Windows host (Windows' own have no disks under Wine), whose disks are the
// EC2 emulator's attachments. It serves CSI on TCP, as the scenario's
// client reaches it.
type hostProcessNode struct {
	env  *emulatortest.Env
	host *winhost.Host
	root string

	stop func()
	conn *grpc.ClientConn
}

// start builds the plugin as cmd/diskplane does with
// --windows-host-process (the library, the Windows mounter, the node
// service) and serves it.
func (n *hostProcessNode) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	proxy, err := csiproxy.NewLibrary(ctx, n.host.HostAPIs())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	m, err := mounter.New(mounter.Options{CSIProxy: proxy, StateDir: `c:\var\lib\kubelet\plugins\` + driverName})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	svc, err := node.New(node.Config{
		Metadata: func(ctx context.Context) (*metadata.Instance, error) {
			return metadata.Get(ctx, metadata.Options{Sources: []string{metadata.SourceIMDS}, IMDSEndpoint: n.env.IMDSURL})
		},
		Mounter:                   m,
		ReservedVolumeAttachments: -1,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	address := freeAddress(t)
	endpoint, err := driver.ParseEndpoint("tcp://" + address)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	d, err := driver.New(driver.Config{Name: driverName, Endpoint: endpoint, Node: svc})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- d.Run(ctx) }()
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	n.conn = conn
	n.stop = func() {
		cancel()
		conn.Close()
		if err := <-served; err != nil {
			t.Errorf("node plugin: %v", err)
		}
		proxy.Close()
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node plugin does not answer: %v", err)
		}
	}
}

// local is where a path of the emulated host's drive is here.
func (n *hostProcessNode) local(path string) string {
	return filepath.Join(n.root, strings.TrimLeft(strings.ReplaceAll(path[2:], "/", `\`), `\`))
}

// TestScenarioHostProcess runs the scenario with the plugin in HostProcess
// mode: the same node logic over the csi-proxy v2 library instead of the
// pipes.
func TestScenarioHostProcess(t *testing.T) {
	env, ctrl := startCloud(t)
	root := testutil.TempDir(t)
	host, err := winhost.New(winhost.Config{Source: &winhost.EC2Source{AdminURL: env.AdminURL}, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	n := &hostProcessNode{env: env, host: host, root: root}
	n.start(t)
	t.Cleanup(func() { n.stop() })
	runScenario(t, &cluster{
		controller: ctrl,
		node:       func() csi.NodeClient { return csi.NewNodeClient(n.conn) },
		restartNode: func(t *testing.T) {
			n.stop()
			n.start(t)
		},
		disks: func(t *testing.T) []winhost.DiskView {
			disks, err := host.Disks()
			must(t, err)
			return disks
		},
		setDisk:       func(t *testing.T, d winhost.Disk) { must(t, host.SetDisk(d)) },
		setUnopenable: func(volumeID string, on bool) error { host.SetUnopenable(volumeID, on); return nil },
		mkdir:         func(t *testing.T, path string) { must(t, os.MkdirAll(n.local(path), 0o755)) },
		exists: func(t *testing.T, path string) bool {
			_, err := os.Lstat(n.local(path))
			return err == nil
		},
	})
}
