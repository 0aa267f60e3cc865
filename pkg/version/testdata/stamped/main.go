// Command stamped prints what package version reports, so the package's test
// can build it with the Makefile's -ldflags and see the stamp arrive.
package main

import (
	"fmt"

	"github.com/diskplane/diskplane/pkg/version"
)

func main() {
	i := version.Get()
	fmt.Printf("%s|%s|%s|%s\n", version.Version(), i.Version, i.Commit, i.BuildDate)
}
