// Package bench measures Diskplane against the physical floor of what it
// does, and, when given one, against another EBS CSI driver in the same run.
// Its tests (build tag bench) are `make bench`: they start the real
// binaries — ec2-emulator with EC2-like latencies, diskplane in controller
// and node mode — drive them over the CSI gRPC API as the sidecars and the
// kubelet would, read the EC2 calls off the emulator's metrics and the
// processes' CPU and memory off /proc, and print one table with each figure,
// its floor and their ratio. Raw data goes to _output/bench/<time>/. The
// figures are printed, never asserted: a benchmark that fails on a slow
// machine measures the machine.
package bench

import "time"

// ProvisionResult is what tests/e2e's TestProvisionToRunning measures in the
// local cluster (P3) and writes to p3.json in the run's directory, where
// this package's report reads it.
type ProvisionResult struct {
	// Pods is how many claims with pods were created; Asked how many were
	// asked for (fewer when the node attaches fewer volumes).
	Pods  int `json:"pods"`
	Asked int `json:"asked"`
	// ToRunning is, per claim, the time from its creation to its pod Running.
	ToRunning []time.Duration `json:"toRunning"`
	// FloorParts are the parts of the least time a claim can take, and
	// Floor their sum.
	FloorParts map[string]time.Duration `json:"floorParts"`
	Floor      time.Duration            `json:"floor"`
	// Note says what differed from what was asked.
	Note string `json:"note,omitempty"`
}

// EncryptedStage is one row of P5 for LUKS2-encrypted volumes, which need
// device-mapper: pkg/driver/node's TestStageEncryptedFigures measures it in
// the node VM (hack/vm) and writes a list of them to p5-luks.json in the
// run's directory, where this package's report reads it.
type EncryptedStage struct {
	// FsType is the filesystem on the LUKS2 mapping.
	FsType string `json:"fsType"`
	// Stage is how long NodeStageVolume of a blank 100 GiB volume took;
	// ByHand the same work done with cryptsetup, mkfs and mount directly.
	Stage  time.Duration `json:"stage"`
	ByHand time.Duration `json:"byHand"`
}

// SnapshotAfterStart is what tests/e2e's TestSnapshotAfterControllerRestart
// measures in the local cluster (P3) and writes to p3-snapshot.json in the
// run's directory: a snapshot taken as soon as a restarted controller
// serves again, which a wait for a predecessor's possible request would
// hold until the controller's visibility window after its start has passed.
type SnapshotAfterStart struct {
	// ToReady is the time from the VolumeSnapshot's creation to its
	// readyToUse; ToAsked the part of it before EC2 got CreateSnapshot.
	ToReady time.Duration `json:"toReady"`
	ToAsked time.Duration `json:"toAsked"`
	// Floor is the snapshot's own latency, as the emulator drew it.
	Floor time.Duration `json:"floor"`
}
