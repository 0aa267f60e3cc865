// Package version reports which build of Diskplane is running. The values are
// stamped in at link time by the Makefile (-ldflags -X), so GetPluginInfo, the
// user agent sent to EC2 and `diskplane --version` all name the same build.
package version

import (
	"fmt"
	"runtime"
)

// These are overwritten by the linker; the defaults mark a build made without
// the Makefile (for example `go run`), which should never reach a cluster.
var (
	version   = "v0.0.0-dev"
	commit    = "unknown"
	buildDate = "unknown"
)

// Info describes one build of the binaries.
type Info struct {
	Version   string
	Commit    string
	BuildDate string
	GoVersion string
	Platform  string
}

// Get returns the build information of the running binary.
func Get() Info {
	return Info{
		Version:   version,
		Commit:    commit,
		BuildDate: buildDate,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
}

// Version returns the release version alone, e.g. "v0.1.0"; it is what the
// CSI GetPluginInfo RPC reports as vendor_version.
func Version() string { return version }

// String renders the build for `--version` and startup logs.
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s, %s)", i.Version, i.Commit, i.BuildDate, i.GoVersion, i.Platform)
}
