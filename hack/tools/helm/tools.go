//go:build tools

// Package tools pins the Helm release whose binary the chart tests and the
// kustomize renderer use. It lives in its own module so that Helm's large
// dependency tree stays out of Diskplane's go.mod.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
