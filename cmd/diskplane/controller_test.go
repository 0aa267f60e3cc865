package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

// TestControllerModeAgainstEmulator starts the binary's serve loop in
// controller mode with the emulator as its EC2 endpoint (through the SDK's
// standard environment variables, as in production) and provisions a volume
// over the CSI socket with the controller flags applied.
func TestControllerModeAgainstEmulator(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{})
	env.Setenv(t)
	sock := filepath.Join(t.TempDir(), "csi.sock")
	fs := flag.NewFlagSet("diskplane", flag.ContinueOnError)
	opts := registerFlags(fs)
	err := fs.Parse([]string{"--mode=controller", "--endpoint=unix://" + sock,
		"--extra-tags=team=storage,cost-center=", "--k8s-tag-cluster-id=c1", "--modify-volume-coalesce-window=100ms", "--visibility-timeout=30s",
		"--client-token-memory=2h"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("socket never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The socket file exists a moment before it listens.
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	rpcCtx, rpcCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rpcCancel()
	if _, err := csi.NewNodeClient(conn).NodeGetInfo(rpcCtx, &csi.NodeGetInfoRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("a node RPC in controller mode: %v, want Unimplemented", err)
	}
	resp, err := csi.NewControllerClient(conn).CreateVolume(rpcCtx, &csi.CreateVolumeRequest{
		Name:          "pvc-cmd",
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	})
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	for _, v := range env.Cloud().Volumes() {
		if v.ID != resp.GetVolume().GetVolumeId() {
			continue
		}
		for k, want := range map[string]string{"team": "storage", "cost-center": "", "kubernetes.io/cluster/c1": "owned", DefaultDriverName + "/cluster": "true"} {
			if got, ok := v.Tags[k]; !ok || got != want {
				t.Fatalf("volume tags %v: want %s=%q", v.Tags, k, want)
			}
		}
		return
	}
	t.Fatalf("the emulator has no volume %s", resp.GetVolume().GetVolumeId())
}

func TestControllerFlagsAreChecked(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{})
	env.Setenv(t)
	for _, tc := range []struct {
		name string
		flag string
	}{
		{name: "reserved extra tag", flag: "--extra-tags=CSIVolumeName=x"},
		{name: "malformed extra tags", flag: "--extra-tags=novalue"},
		{name: "driver-owned extra tag", flag: "--extra-tags=" + DefaultDriverName + "/cluster=false"},
		{name: "zero coalesce window", flag: "--modify-volume-coalesce-window=0s"},
		{name: "zero visibility timeout", flag: "--visibility-timeout=0s"},
		{name: "negative client token memory", flag: "--client-token-memory=-1h"},
		{name: "cluster ID too long for a tag key", flag: "--k8s-tag-cluster-id=" + strings.Repeat("c", 200)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--mode=controller", "--endpoint=unix://" + filepath.Join(t.TempDir(), "csi.sock"), tc.flag}
			if got := run(args); got != 1 {
				t.Fatalf("run(%v) = %d, want 1", args, got)
			}
		})
	}
}

// TestSnapshotIntents: the controller records its snapshot intents through
// the Kubernetes API it is given, records none when the flag is off or when
// it runs outside a pod without --kubeconfig (then it waits as before), and
// refuses to start with a kubeconfig it cannot read.
func TestSnapshotIntents(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := writeKubeconfig(t, dir)
	// Outside a pod, as the tests run.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, tc := range []struct {
		name       string
		args       []string
		wantLedger bool
		wantErr    string
	}{
		{name: "kubeconfig", args: []string{"--kubeconfig=" + kubeconfig}, wantLedger: true},
		{name: "turned off", args: []string{"--kubeconfig=" + kubeconfig, "--snapshot-intents=false"}},
		{name: "outside a pod", args: nil},
		{name: "kubeconfig missing", args: []string{"--kubeconfig=" + filepath.Join(dir, "missing")},
			wantErr: "--snapshot-intents: no Kubernetes client from kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("diskplane", flag.ContinueOnError)
			opts := registerFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			intents, err := snapshotIntents(opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("snapshotIntents: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := intents != nil; got != tc.wantLedger {
				t.Fatalf("snapshotIntents gave a ledger: %v, want %v", got, tc.wantLedger)
			}
		})
	}
}
