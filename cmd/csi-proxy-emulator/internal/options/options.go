// Package options defines csi-proxy-emulator's command-line flags. The
// command is a Windows program, but its flags live in this package, which
// every platform builds, so that a plain `go test` on Linux (make test)
// holds docs/options.md to exactly what the command parses.
package options

import (
	"flag"
	"strings"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/csiproxyapi"
)

// Options are the command's settings, as its flags set them.
type Options struct {
	// EC2Admin is the EC2 emulator's admin API, which says what is attached.
	EC2Admin string
	// InstanceID is the instance the emulated host is; empty: the EC2
	// emulator's local instance.
	InstanceID string
	// DataDir keeps the host's state; empty: in memory.
	DataDir string
	// WorkingDirs are the directories the filesystem API may touch,
	// comma-separated, as csi-proxy's -kubelet-path.
	WorkingDirs string
	// PipePrefix prefixes the pipe names; empty: csi-proxy's own.
	PipePrefix string
	// AdminListen is where the admin API listens; empty disables it.
	AdminListen string
	// Release is the csi-proxy release to answer as.
	Release string
	// ShowVersion prints the version instead of serving.
	ShowVersion bool
}

// Register defines the command's flags on fs, bound to o, and klog's
// logging flags with them: everything the command parses, so that a test
// of this function sees what a user can pass.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.EC2Admin, "ec2-admin", "http://127.0.0.1:8702", "the EC2 emulator's admin API, which says what is attached")
	fs.StringVar(&o.InstanceID, "instance-id", "", "the instance this host is; empty: the EC2 emulator's local instance")
	fs.StringVar(&o.DataDir, "data-dir", `C:\ProgramData\csi-proxy-emulator`, "where the host's state (state.json) is kept; empty: in memory")
	fs.StringVar(&o.WorkingDirs, "working-dirs", csiproxyapi.DefaultWorkingDir, "comma-separated directories the filesystem API may touch (csi-proxy's -kubelet-path)")
	fs.StringVar(&o.PipePrefix, "pipe-prefix", "", "prefix of the pipe names; empty: csi-proxy's own (csi-proxy)")
	fs.StringVar(&o.AdminListen, "admin-listen", "127.0.0.1:8703", "host:port of the admin API (GET /disks, PUT /disks, POST /faults); empty disables it")
	fs.StringVar(&o.Release, "csi-proxy-version", csiproxyapi.DefaultRelease.Version, "the csi-proxy release to answer as: "+releases())
	fs.BoolVar(&o.ShowVersion, "version", false, "print the version and exit")
	klog.InitFlags(fs)
}

// Dirs returns WorkingDirs as a list, blanks dropped.
func (o *Options) Dirs() []string {
	var dirs []string
	for _, d := range strings.Split(o.WorkingDirs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// releases lists the releases --csi-proxy-version takes.
func releases() string {
	var versions []string
	for _, r := range csiproxyapi.Releases {
		versions = append(versions, r.Version)
	}
	return strings.Join(versions, ", ")
}
