//go:build tools

// Package tools pins the in-memory OCI registry (go-containerregistry's
// cmd/registry) that the image push test pushes to, since no registry is
// reachable from the development machines. It lives in its own module so
// that the registry's dependencies stay out of Diskplane's go.mod.
package tools

import _ "github.com/google/go-containerregistry/cmd/registry"
