// Package sanity holds no code of its own: its tests run the Kubernetes CSI
// sanity suite (github.com/kubernetes-csi/csi-test/v5/pkg/sanity) against the
// whole Diskplane plugin in all mode, with the real cloud layer talking to an
// in-process EC2 emulator whose volumes are real loop devices, and the real
// node service formatting and mounting them. README.md lists every spec the
// suite skips and why.
package sanity
