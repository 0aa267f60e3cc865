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
