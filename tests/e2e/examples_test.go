//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// gvr names the API resource a dynamic client talks to.
type gvr = schema.GroupVersionResource

var (
	podsResource      = gvr{Version: "v1", Resource: "pods"}
	claimsResource    = gvr{Version: "v1", Resource: "persistentvolumeclaims"}
	snapshotsResource = gvr{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	contentsResource  = gvr{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
)

// kinds maps each kind the examples use to its resource and whether it is
// namespaced.
var kinds = map[string]struct {
	res        gvr
	namespaced bool
}{
	"Pod":                   {podsResource, true},
	"PersistentVolumeClaim": {claimsResource, true},
	"Secret":                {gvr{Version: "v1", Resource: "secrets"}, true},
	"ServiceAccount":        {gvr{Version: "v1", Resource: "serviceaccounts"}, true},
	"VolumeSnapshot":        {snapshotsResource, true},
	"StorageClass":          {gvr{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}, false},
	"VolumeAttributesClass": {gvr{Group: "storage.k8s.io", Version: "v1", Resource: "volumeattributesclasses"}, false},
	"VolumeSnapshotClass":   {gvr{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}, false},
}

func resourceOf(t *testing.T, o *unstructured.Unstructured) (gvr, bool) {
	t.Helper()
	k, ok := kinds[o.GetKind()]
	if !ok {
		t.Fatalf("%s %s: a kind the e2e tests do not know", o.GetKind(), o.GetName())
	}
	return k.res, k.namespaced
}

// manifests is what one or more example directories hold, made ready for a
// scenario.
type manifests []*unstructured.Unstructured

// example reads every YAML file of examples/<dir> (in name order) for this
// scenario: namespaced objects go to its namespace; the classes, which are
// cluster-wide, get the scenario's suffix, and so do the references to them
// (a claim's storageClassName and volumeAttributesClassName, a snapshot's
// volumeSnapshotClassName), so that scenarios running at once never share
// or delete each other's classes. Everything else is exactly what a user
// applies.
func (sc *scenario) example(dir string) manifests {
	sc.t.Helper()
	files, err := filepath.Glob(filepath.Join(env.repo, "examples", dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		sc.t.Fatalf("examples/%s has no manifests (%v)", dir, err)
	}
	slices.Sort(files)
	var out manifests
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			sc.t.Fatal(err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				sc.t.Fatalf("%s: %v", f, err)
			}
			if obj == nil {
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			sc.adopt(u)
			out = append(out, u)
		}
	}
	return out
}

// adopt moves an example object into the scenario (see example).
func (sc *scenario) adopt(u *unstructured.Unstructured) {
	if _, namespaced := resourceOf(sc.t, u); namespaced {
		u.SetNamespace(sc.ns)
	} else {
		u.SetName(sc.className(u.GetName()))
	}
	rename := func(fields ...string) {
		if name, found, _ := unstructured.NestedString(u.Object, fields...); found && name != "" {
			if err := unstructured.SetNestedField(u.Object, sc.className(name), fields...); err != nil {
				sc.t.Fatal(err)
			}
		}
	}
	switch u.GetKind() {
	case "PersistentVolumeClaim":
		rename("spec", "storageClassName")
		rename("spec", "volumeAttributesClassName")
	case "VolumeSnapshot":
		rename("spec", "volumeSnapshotClassName")
	}
}

// className is the scenario's name for an example's class.
func (sc *scenario) className(name string) string { return name + "-" + sc.suffix }

// get returns the object of this kind (and, when given, this name as the
// example spells it), failing the test when there is none.
func (m manifests) get(t *testing.T, kind string, name ...string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range m {
		if o.GetKind() == kind && (len(name) == 0 || o.GetName() == name[0]) {
			return o
		}
	}
	t.Fatalf("the example has no %s %v", kind, name)
	return nil
}

// without returns the manifests except those of the kinds named.
func (m manifests) without(kinds ...string) manifests {
	var out manifests
	for _, o := range m {
		if !slices.Contains(kinds, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

// set changes one field of an object, failing the test on a bad path.
func set(t *testing.T, o *unstructured.Unstructured, value any, fields ...string) {
	t.Helper()
	if err := unstructured.SetNestedField(o.Object, value, fields...); err != nil {
		t.Fatalf("%s %s: set %v: %v", o.GetKind(), o.GetName(), fields, err)
	}
}
