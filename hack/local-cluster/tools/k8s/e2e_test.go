// Kubernetes' "External Storage" end-to-end suite as a test binary:
// `go test -c -o e2e.test .` in this directory (build.sh does it). Only the
// storage/external specs are linked in, so the binary stays small, and its
// flags are those of upstream e2e.test: -kubeconfig, -storage.testdriver,
// -ginkgo.focus/skip, -report-dir, and so on.

package tools

import (
	"flag"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	_ "k8s.io/kubernetes/test/e2e/storage/external"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
)

// TestMain registers the e2e framework's flags before parsing them, because
// the framework reads its whole configuration from the command line.
func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	// As upstream's e2e.test: files a test driver definition names (its
	// StorageClass.FromFile, VolumeAttributesClass.FromFile) are found
	// relative to -repo-root.
	if framework.TestContext.RepoRoot != "" {
		testfiles.AddFileSource(testfiles.RootFileSource{Root: framework.TestContext.RepoRoot})
	}
	os.Exit(m.Run())
}

// TestExternalStorage hands control to Ginkgo, which runs every spec that the
// -storage.testdriver definitions and the focus/skip expressions select.
func TestExternalStorage(t *testing.T) {
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Diskplane local cluster: Kubernetes External Storage", suiteConfig, reporterConfig)
}
