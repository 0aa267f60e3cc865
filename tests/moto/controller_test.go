//go:build moto

package moto

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/testutil/motoserver"
)

// TestMain adds klog's flags, for the in-process node service's log.
func TestMain(m *testing.M) {
	klog.InitFlags(flag.CommandLine)
	os.Exit(m.Run())
}

// binaryEnv names the diskplane binary under test (make test-moto passes
// _output/bin/diskplane).
const binaryEnv = "DISKPLANE_BINARY"

// instance is one EC2 instance the harness started in moto: a node.
type instance struct{ ID, Zone string }

// rig is a moto_server of its own, instances in it, and the real diskplane
// binary in controller mode using it, in moto's default account.
type rig struct {
	server *motoserver.Server
	// account is the default account, seen through the harness's own
	// client (for set-up and the audit; the controller's calls are not
	// counted here).
	account   *motoserver.Account
	instances []instance
	socket    string
	client    csi.ControllerClient
	conn      *grpc.ClientConn
}

// startRig starts moto, one instance per zone given (in order), and the
// controller. The controller's flags are production's but two: moto's
// reads are consistent at once, so nothing a predecessor sent can still be
// invisible after 2 s (--visibility-timeout, the window a controller waits
// after its start before it trusts a lookup by name); and moto keeps no
// ClientToken, so every create must look its name up first
// (--client-token-memory=0).
func startRig(t *testing.T, zones ...string) *rig {
	t.Helper()
	srv := motoserver.Start(t)
	bin := os.Getenv(binaryEnv)
	if bin == "" {
		t.Fatalf("%s is not set: run make test-moto", binaryEnv)
	}
	r := &rig{server: srv, account: srv.DefaultAccount()}
	ctx := t.Context()
	for _, zone := range zones {
		id, err := r.account.RunInstance(ctx, zone, "m5.large")
		if err != nil {
			t.Fatal(err)
		}
		r.instances = append(r.instances, instance{ID: id, Zone: zone})
	}

	dir := t.TempDir()
	r.socket = filepath.Join(dir, "csi.sock")
	logPath := filepath.Join(dir, "controller.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--mode=controller", "--endpoint=unix://"+r.socket, "--visibility-timeout=2s", "--client-token-memory=0", "--v=2")
	cmd.Env = controllerEnviron(srv)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logFile.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("the controller's log:\n%s", tail(string(out), 200))
		}
	})

	r.conn, err = grpc.NewClient("unix:"+r.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.conn.Close() })
	r.client = csi.NewControllerClient(r.conn)
	identity := csi.NewIdentityClient(r.conn)
	deadline := time.Now().Add(time.Minute)
	for {
		probeCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := identity.Probe(probeCtx, &csi.ProbeRequest{})
		cancel()
		if err == nil && resp.GetReady().GetValue() {
			return r
		}
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logPath)
			t.Fatalf("the controller exited (%v) before it was ready:\n%s", err, out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the controller was not ready within a minute: %v", err)
		}
	}
}

// controllerEnviron is this process's environment with its AWS settings
// replaced by the standard ones that point at srv: nothing else tells the
// controller where EC2 is.
func controllerEnviron(srv *motoserver.Server) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	for k, v := range srv.Environ() {
		env = append(env, k+"="+v)
	}
	return env
}

// checkNothingLeft fails the test for every volume other than the
// instances' root volumes, and every snapshot, still in moto.
func (r *rig) checkNothingLeft(t *testing.T) {
	t.Helper()
	client := r.account.EC2Client()
	ctx := t.Context()
	roots := map[string]bool{}
	instances, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range instances.Reservations {
		for _, in := range res.Instances {
			for _, m := range in.BlockDeviceMappings {
				if aws.ToString(m.DeviceName) == aws.ToString(in.RootDeviceName) && m.Ebs != nil {
					roots[aws.ToString(m.Ebs.VolumeId)] = true
				}
			}
		}
	}
	volumes, err := client.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range volumes.Volumes {
		if !roots[aws.ToString(v.VolumeId)] {
			t.Errorf("volume %s (%s, %s) is left in moto", aws.ToString(v.VolumeId), v.State, tagValue(v.Tags, cloud.TagVolumeName))
		}
	}
	snapshots, err := client.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snapshots.Snapshots {
		t.Errorf("snapshot %s (%s) is left in moto", aws.ToString(s.SnapshotId), tagValue(s.Tags, cloud.TagSnapshotName))
	}
}

func tagValue(tags []types.Tag, key string) string {
	for _, tag := range tags {
		if aws.ToString(tag.Key) == key {
			return aws.ToString(tag.Value)
		}
	}
	return ""
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
