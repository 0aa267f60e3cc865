package main

import (
	"context"
	"flag"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
)

// controllerFlags are the flags that only the controller service reads.
type controllerFlags struct{}

func (f *controllerFlags) register(*flag.FlagSet) {}

// buildController builds the Controller service. Until the controller issue
// lands, every controller RPC answers Unimplemented.
func buildController(context.Context, *options, prometheus.Registerer) (csi.ControllerServer, error) {
	return &csi.UnimplementedControllerServer{}, nil
}
