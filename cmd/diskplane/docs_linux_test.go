package main

import (
	"context"
	"flag"
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
// emulator, as it would to EC2.
func TestMetricsDocumented(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{})
	env.Setenv(t)
	t.Setenv(metadata.NodeNameEnv, "") // no startup-taint work: there is no cluster
	fs := flag.NewFlagSet("diskplane", flag.ContinueOnError)
	opts := registerFlags(fs)
	if err := fs.Parse([]string{"--endpoint=unix://" + filepath.Join(t.TempDir(), "csi.sock")}); err != nil {
		t.Fatal(err)
	}

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
	_, stopController, err := buildController(ctx, opts, rec)
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
