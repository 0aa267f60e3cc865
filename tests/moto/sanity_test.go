//go:build moto

package moto

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"github.com/diskplane/diskplane/pkg/cloud/metadata"
	"github.com/diskplane/diskplane/pkg/driver"
	"github.com/diskplane/diskplane/pkg/driver/node"
	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/tests/sanity/ec2ids"
)

// gib is a binary gigabyte, the unit EBS sizes volumes in.
const gib int64 = 1 << 30

// controllerSpecs selects csi-sanity's controller specs: every container
// tagged [Controller Server].
const controllerSpecs = `\[Controller Server\]`

// TestControllerSanity runs csi-sanity's controller specs against the
// diskplane binary in controller mode with moto as its EC2. The specs ask
// the node service only who the node is (NodeGetInfo, for the node ID they
// publish to); the real node service answers, in this process, with the
// instance moto describes, as IMDS would describe it on EC2 (moto serves
// no instance metadata).
func TestControllerSanity(t *testing.T) {
	r := startRig(t, "us-east-1a")
	nodeEndpoint := serveNode(t, r)

	cfg := sanity.NewTestConfig()
	cfg.Address = nodeEndpoint
	cfg.ControllerAddress = "unix://" + r.socket
	dir := t.TempDir()
	cfg.TargetPath, cfg.StagingPath = filepath.Join(dir, "target"), filepath.Join(dir, "staging")
	cfg.TestVolumeSize = 8 * gib
	cfg.TestVolumeExpandSize = 10 * gib
	cfg.TestVolumeParameters = map[string]string{"type": "gp3"}
	cfg.TestVolumeMutableParameters = map[string]string{"iops": "4000", "throughput": "250"}
	cfg.IDGen = ec2ids.Generator{}
	ginkgo.Describe("moto", func() { sanity.GinkgoTest(&cfg) })

	var report types.Report
	ginkgo.ReportAfterSuite("Diskplane against moto", func(rep types.Report) { report = rep })
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, reporter := ginkgo.GinkgoConfiguration()
	suite.FocusStrings = append(suite.FocusStrings, controllerSpecs)
	suite.SkipStrings = append(suite.SkipStrings, motoSkips()...)
	ginkgo.RunSpecs(t, "Diskplane controller sanity against moto", suite, reporter)

	count := map[types.SpecState]int{}
	for _, s := range report.SpecReports {
		if s.LeafNodeType == types.NodeTypeIt {
			count[s.State]++
			if s.RunTime > 5*time.Second {
				t.Logf("%s took %s", s.FullText(), s.RunTime.Round(time.Millisecond))
			}
		}
	}
	t.Logf("csi-sanity's controller specs against moto: %d passed, %d failed; %d skipped: not controller specs, or in README.md's list",
		count[types.SpecStatePassed], count[types.SpecStateFailed], count[types.SpecStateSkipped])
	for spec, why := range skippedSpecs {
		t.Logf("skipped %q: %s", spec, why)
	}
	if count[types.SpecStatePassed] == 0 {
		t.Error("no spec passed: the focus selected nothing")
	}
	r.checkNothingLeft(t)
}

// motoSkips are the controller specs moto cannot serve, by the text that
// names them; README.md says why for each.
func motoSkips() []string {
	var out []string
	for spec := range skippedSpecs {
		out = append(out, spec)
	}
	return out
}

// skippedSpecs maps each skipped spec's text to the moto limitation that
// rules it out.
var skippedSpecs = map[string]string{
	"should create volume from an existing source volume": "moto does not implement CopyVolumes (volume clones)",
}

// serveNode serves the real node service on a socket of its own, as the
// first instance of r: the node the specs publish to.
func serveNode(t *testing.T, r *rig) string {
	t.Helper()
	node0 := r.instances[0]
	m, err := mounter.New(mounter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := node.New(node.Config{
		Mounter:                   m,
		ReservedVolumeAttachments: -1,
		Metadata: func(ctx context.Context) (*metadata.Instance, error) {
			return describeInstance(ctx, r, node0.ID)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "unix://" + filepath.Join(t.TempDir(), "node.sock")
	parsed, err := driver.ParseEndpoint(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	d, err := driver.New(driver.Config{Name: "ebs.csi.diskplane.io", Endpoint: parsed, Node: svc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("node service: %v", err)
		}
	})
	return endpoint
}

// describeInstance is what IMDS would tell a node about itself, from
// moto's DescribeInstances.
func describeInstance(ctx context.Context, r *rig, id string) (*metadata.Instance, error) {
	out, err := r.account.EC2Client().DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return nil, err
	}
	if len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
		return nil, fmt.Errorf("moto describes %d reservations for %s", len(out.Reservations), id)
	}
	in := out.Reservations[0].Instances[0]
	mappings := map[string]string{}
	for i, m := range in.BlockDeviceMappings {
		name := fmt.Sprintf("ebs%d", i)
		if aws.ToString(m.DeviceName) == aws.ToString(in.RootDeviceName) {
			name = "root"
		}
		mappings[name] = aws.ToString(m.DeviceName)
	}
	return &metadata.Instance{
		ID: id, Type: string(in.InstanceType), Region: "us-east-1",
		Zone:                aws.ToString(in.Placement.AvailabilityZone),
		NetworkInterfaces:   max(1, len(in.NetworkInterfaces)),
		BlockDeviceMappings: mappings, Source: metadata.SourceIMDS,
	}, nil
}
