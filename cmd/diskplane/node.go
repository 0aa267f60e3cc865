package main

import (
	"context"
	"flag"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
)

// nodeFlags are the flags that only the node service reads.
type nodeFlags struct{}

func (f *nodeFlags) register(*flag.FlagSet) {}

// buildNode builds the Node service. Until the node issue lands, every node
// RPC answers Unimplemented.
func buildNode(context.Context, *options, prometheus.Registerer) (csi.NodeServer, error) {
	return &csi.UnimplementedNodeServer{}, nil
}
