//go:build moto

// Package moto proves Diskplane's controller against moto, the independent
// AWS mock, rather than ec2-emulator, which this project wrote: the real
// diskplane binary in controller mode finds moto through the SDK's standard
// variables only, csi-sanity's controller specs and a lifecycle load run
// through it over gRPC, and workload identity's STS and KMS calls run
// against moto's STS and KMS. make test-moto runs it (with the cloud
// layer's integration tests against moto); README.md lists what moto cannot
// serve and what the harness does about it.
package moto
