package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/diskplane/diskplane/pkg/cloud/metadata"
	"github.com/diskplane/diskplane/pkg/driver"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/metrics"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// metricsDoc lists every metric the binaries expose.
var metricsDoc = filepath.Join("..", "..", "docs", "metrics.md")

// TestMetricsDocumented keeps docs/metrics.md in step with the metrics the
// plugin exposes: it builds the registry, the controller and the node
// service as serve does, records every collector they register (also the
// labelled ones no call has touched yet) and checks each against the page,
// and each metric on the page against them. The controller talks to the
// emulator, as it would to EC2, and runs its node witness against an API
// server that is not there (its metrics are registered all the same).
func TestMetricsDocumented(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{})
	env.Setenv(t)
	t.Setenv(metadata.NodeNameEnv, "") // no startup-taint work: there is no cluster
	endpoint := "--endpoint=unix://" + filepath.Join(t.TempDir(), "csi.sock")
	parse := func(args ...string) *options {
		fs := flag.NewFlagSet("diskplane", flag.ContinueOnError)
		opts := registerFlags(fs)
		if err := fs.Parse(append([]string{endpoint}, args...)); err != nil {
			t.Fatal(err)
		}
		return opts
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(unreachableKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := parse()
	controllerOpts := parse("--node-witness", "--snapshot-intents=false", "--kubeconfig="+kubeconfig)

	registry := metrics.NewRegistry()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := testutil.GatheredMetrics(families) // the Go runtime and process collectors
	rec := &testutil.RecordingRegisterer{Registerer: registry}
	if err := driver.RegisterMetrics(rec); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, stopController, err := buildController(ctx, controllerOpts, rec)
	if err != nil {
		t.Fatal(err)
	}
	_, stopNode, err := buildNode(ctx, opts, rec)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	stopNode()
	stopController()

	recorded, err := rec.RecordedMetrics()
	if err != nil {
		t.Fatal(err)
	}
	testutil.CheckMetricsDocumented(t, metricsDoc, []string{"diskplane", "Go runtime and process"}, append(found, recorded...))
}

// unreachableKubeconfig names an API server nobody listens at.
const unreachableKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
`
