//go:build tools

// Package tools pins cyclonedx-gomod, which writes the CycloneDX SBOM of
// the Go modules the plugin binary links for make release, since an SBOM
// must come from a maintained tool rather than code of our own. It lives in
// its own module so that the tool's dependencies stay out of Diskplane's
// go.mod.
package tools

import _ "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod"
