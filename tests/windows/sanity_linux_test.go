//go:build linux && wine

package windows

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"github.com/diskplane/diskplane/pkg/driver"
	"github.com/diskplane/diskplane/pkg/emulator/csiproxyapi"
	"github.com/diskplane/diskplane/pkg/filetree"
	"github.com/diskplane/diskplane/pkg/testutil"
	"github.com/diskplane/diskplane/tests/sanity/ec2ids"
)

// sanityFocus is the part of csi-sanity this runs: the node service's specs
// (which use the controller to create and attach their volumes). The
// controller's own specs run in tests/sanity.
const sanityFocus = "Node Service"

// expectedNodeSkips are the node specs that do not run against the Windows
// node, with the reason; docs/windows.md lists them.
var expectedNodeSkips = map[string]string{
	"Node Service NodeGetVolumeHealth should fail when no volume id is provided": noVolumeHealth,
	"Node Service NodeGetVolumeHealth should return health for a valid volume":   noVolumeHealth,
	"Node Service NodeGetStorageHealth should return appropriate response":       noVolumeHealth,
	"Node Service NodePublishVolume with single node multi writer capability should fail when volume with single node single writer access mode is already mounted at a different target path": noSingleWriter,
}

const noSingleWriter = "the Windows node does not offer SINGLE_NODE_MULTI_WRITER: csi-proxy cannot list the symlinks to a " +
	"staged volume, which SINGLE_NODE_SINGLE_WRITER needs; the kubelet then sends SINGLE_NODE_WRITER and enforces ReadWriteOncePod itself"

const noVolumeHealth = "Diskplane does not offer the volume health RPCs (GET_VOLUME_HEALTH, GET_STORAGE_HEALTH), which are alpha in CSI 1.13"

// TestSanity runs csi-sanity's node specs against the real diskplane.exe
// under Wine, through the emulated csi-proxy, with Diskplane's controller
// on Linux (in this process) over the same EC2 emulator. Volumes are mount
// volumes (the Windows node has no raw block volumes) with the default
// filesystem, NTFS.
func TestSanity(t *testing.T) {
	testutil.RequireWine(t, winePrefix)
	env, ctrl := startCloud(t)
	// Ginkgo runs once per process: the Makefile runs this test again for
	// the oldest csi-proxy release Diskplane supports.
	version := os.Getenv("DISKPLANE_CSI_PROXY_VERSION")
	if version == "" {
		version = csiproxyapi.DefaultRelease.Version
	}
	t.Logf("csi-proxy emulated as %s", version)
	n := startWindowsNode(t, env, version)

	// One socket serves the controller and forwards node calls to
	// diskplane.exe (see nodeForwarder).
	socket := filepath.Join(testutil.TempDir(t), "csi.sock")
	endpoint, err := driver.ParseEndpoint("unix://" + socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	forward, err := newNodeForwarder(ctx, csi.NewNodeClient(n.conn), csi.NewIdentityClient(n.conn))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	d, err := driver.New(driver.Config{Name: driverName, Endpoint: endpoint, Controller: ctrl, Node: forward})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("controller plugin: %v", err)
		}
	})

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + socket
	cfg.TestVolumeAccessType = "mount"
	cfg.TestVolumeSize = 1 << 30
	cfg.TestVolumeExpandSize = 2 << 30
	cfg.TestVolumeParameters = map[string]string{"type": "gp3"}
	cfg.TestNodeVolumeAttachLimit = true
	cfg.IDGen = ec2ids.Generator{}
	cfg.TargetPath = `C:\var\lib\kubelet\sanity\target`
	cfg.StagingPath = `C:\var\lib\kubelet\sanity\staging`
	// csi-sanity makes and removes its directories on the Windows host,
	// whose C: drive is the Wine prefix's.
	var made atomic.Int64
	mkdir := func(path string) (string, error) {
		p := fmt.Sprintf("%s-%d", path, made.Add(1))
		return p, os.MkdirAll(localPath(p), 0o755)
	}
	remove := func(path string) error { return filetree.Remove(localPath(path)) }
	cfg.CreateTargetDir, cfg.CreateStagingDir = mkdir, mkdir
	cfg.RemoveTargetPath, cfg.RemoveStagingPath = remove, remove
	cfg.CheckPath = func(path string) (sanity.PathKind, error) {
		fi, err := os.Lstat(localPath(path))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return sanity.PathIsNotFound, nil
		case err != nil:
			return "", err
		case fi.IsDir():
			return sanity.PathIsDir, nil
		case fi.Mode().IsRegular():
			return sanity.PathIsFile, nil
		}
		return sanity.PathIsOther, nil
	}

	ginkgo.Describe("Windows node", func() { sanity.GinkgoTest(&cfg) })
	var report types.Report
	ginkgo.ReportAfterSuite("Windows node sanity summary", func(r types.Report) { report = r })
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, reporter := ginkgo.GinkgoConfiguration()
	if len(suite.FocusStrings) == 0 {
		suite.FocusStrings = []string{sanityFocus}
	}
	ginkgo.RunSpecs(t, "Diskplane CSI sanity, Windows node", suite, reporter)

	var skipped []string
	count := map[types.SpecState]int{}
	for _, s := range report.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt || !strings.HasPrefix(specName(s), sanityFocus) {
			continue
		}
		count[s.State]++
		if s.State == types.SpecStateSkipped || s.State == types.SpecStatePending {
			skipped = append(skipped, specName(s))
			if _, ok := expectedNodeSkips[specName(s)]; !ok {
				t.Errorf("%q was skipped (%s), which is not expected", specName(s), s.Failure.Message)
			}
		}
	}
	t.Logf("node specs: %d passed, %d failed, %d skipped", count[types.SpecStatePassed],
		count[types.SpecStateFailed]+count[types.SpecStatePanicked], count[types.SpecStateSkipped]+count[types.SpecStatePending])
	if len(suite.FocusStrings) == 1 && suite.FocusStrings[0] == sanityFocus {
		for spec := range expectedNodeSkips {
			if !slices.Contains(skipped, spec) {
				t.Errorf("%q ran, but is listed as skipped", spec)
			}
		}
	}
	for _, v := range env.Cloud().Volumes() {
		if !v.Root {
			t.Errorf("volume %s (%s) is left in the cloud", v.ID, v.State)
		}
	}
	for _, d := range n.disks(t) {
		if d.Number != 0 && d.Attached || d.Number != 0 && len(d.MountPoints) > 0 {
			t.Errorf("disk of %s is left on the Windows host (attached %v, mounted at %v)", d.VolumeID, d.Attached, d.MountPoints)
		}
	}
}

// specName names a spec without the top container: its containers below
// it, and its own text.
func specName(s types.SpecReport) string {
	return strings.Join(append(slices.Clone(s.ContainerHierarchyTexts[1:]), s.LeafNodeText), " ")
}
