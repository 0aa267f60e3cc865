//go:build vm

package sanity

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
)

// The environment hack/vm/nvme.sh gives TestSanityNVMe inside the node VM.
const (
	envNodeEndpoint       = "DISKPLANE_VM_NODE"       // the node plugin in the VM, e.g. unix:///run/diskplane/csi.sock
	envControllerEndpoint = "DISKPLANE_VM_CONTROLLER" // the controller on the host, host:port, e.g. 10.0.2.2:18710
	envEmulatorAdmin      = "DISKPLANE_VM_ADMIN"      // the emulator's admin API on the host
	envAccess             = "DISKPLANE_VM_ACCESS"     // mount or block
	envEncrypted          = "DISKPLANE_VM_ENCRYPTED"  // 1: volumes encrypted on the node (nodeEncryption: luks2)
)

// vmPassphrase is the LUKS passphrase of the encrypted run's volumes.
const vmPassphrase = "sanity passphrase, not a secret"

// TestSanityNVMe runs csi-sanity against the production node path: the node
// plugin, as cmd/diskplane runs it in node mode (no --emulator-loop-devices),
// inside a VM with Debian's kernel, where the emulator's guest agent attaches
// volumes as NVMe namespaces with EBS's serial numbers and model, and
// Diskplane's controller on the host over the EC2 emulator that plays the
// VM. hack/vm/nvme.sh (make test-vm) builds this binary with -tags vm and
// runs it in the VM once per access type: each run is a process of its own,
// so csi-sanity's names differ between them and one cloud serves both.
func TestSanityNVMe(t *testing.T) {
	node, ctrl, admin, access := os.Getenv(envNodeEndpoint), os.Getenv(envControllerEndpoint), os.Getenv(envEmulatorAdmin), os.Getenv(envAccess)
	if node == "" || ctrl == "" || admin == "" || (access != "mount" && access != "block") {
		t.Skipf("!!! SKIPPED: run by hack/vm/nvme.sh inside the node VM (%s, %s, %s, %s=mount|block unset) !!!",
			envNodeEndpoint, envControllerEndpoint, envEmulatorAdmin, envAccess)
	}
	secrets := map[string]string{}
	if os.Getenv(envEncrypted) == "1" {
		secrets["luksPassphrase"] = vmPassphrase
	}
	dir := t.TempDir()
	cfg := testConfig(coNode(t, node, ctrl, secrets), dir, access)
	cfg.ControllerAddress = ctrl
	if len(secrets) > 0 {
		// A StorageClass with nodeEncryption: luks2 and node-stage and
		// node-expand secrets holding the passphrase.
		cfg.TestVolumeParameters["nodeEncryption"] = "luks2"
		cfg.SecretsFile = filepath.Join(dir, "secrets.yaml")
		if err := os.WriteFile(cfg.SecretsFile, []byte("NodeStageVolumeSecret:\n  luksPassphrase: "+vmPassphrase+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ginkgo.Describe(access+" access", func() { sanity.GinkgoTest(&cfg) })
	var report types.Report
	ginkgo.ReportAfterSuite("Diskplane NVMe sanity summary", func(r types.Report) { report = r })
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Diskplane CSI sanity on NVMe")

	t.Logf("%s access: %s", access, countSpecs(report, access))
	checkSkips(t, report, []string{access})
	checkCloudEmpty(t, admin)
}

// checkCloudEmpty fails the test when the emulator still holds a volume
// (other than the instance's root volume) or a snapshot after the suite.
// Volumes still deleting are given the emulator's delete latency to go.
func checkCloudEmpty(t *testing.T, admin string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if leftovers(t, admin) == 0 {
			return
		}
	}
	leftovers(t, admin)
	t.Error("the suite left the resources above in the cloud")
}

// leftovers counts, and logs, the volumes (other than the root volume) and
// snapshots the emulator holds.
func leftovers(t *testing.T, admin string) int {
	t.Helper()
	var volumes []struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Root  bool   `json:"root"`
	}
	var snapshots []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	for path, into := range map[string]any{"/volumes": &volumes, "/snapshots": &snapshots} {
		resp, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(into)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatalf("%s%s: %v", admin, path, err)
		}
	}
	n := 0
	for _, v := range volumes {
		if !v.Root {
			t.Logf("volume %s (%s) is in the cloud", v.ID, v.State)
			n++
		}
	}
	for _, s := range snapshots {
		t.Logf("snapshot %s (%s) is in the cloud", s.ID, s.State)
		n++
	}
	return n
}
