//go:build e2e_install

package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
)

// uninstallTimeout bounds the wait for everything to be gone: the pods'
// graceful stop (the node plugin's is up to 30 s) and the kubelet dropping
// the driver from the CSINode.
const uninstallTimeout = 3 * time.Minute

// nodeIDAnnotation is where the kubelet records the node ID of each CSI
// driver registered on the node.
const nodeIDAnnotation = "csi.volume.kubernetes.io/nodeid"

// TestUninstall uninstalls Diskplane as a user does (`helm uninstall`, or
// `kubectl delete -k` of the overlay that was applied) and then checks that
// nothing of it is left in the cluster: every object the install made
// (from `helm get manifest` or `kubectl kustomize`, each checked to exist
// before), every object of any kind in any namespace with the chart's
// labels, the cluster-wide kinds the chart makes (CSIDriver, ClusterRoles
// and bindings, StorageClasses, VolumeSnapshotClasses,
// VolumeAttributesClasses, ValidatingAdmissionPolicies and bindings,
// PriorityClasses), Helm's release records, and the driver in the node's
// CSINode and node ID annotation. The sidecars' leader-election Leases are
// not the install's (the sidecars make them, without labels) and stay, as
// docs/install.md says; the test logs them.
func TestUninstall(t *testing.T) {
	ctx := t.Context()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.client.Discovery()))
	installed := installedObjects(t)
	for _, o := range installed {
		if _, err := get(ctx, mapper, o); err != nil {
			t.Fatalf("%s before the uninstall: %v", describe(o), err)
		}
	}
	t.Logf("the install made %d objects, all there", len(installed))

	start := time.Now()
	var out string
	var err error
	switch env.method {
	case byHelm:
		out, err = helm(ctx, "uninstall", env.release, "--namespace", env.namespace)
	case byKustomize:
		out, err = kubectl(ctx, "delete", "-k", env.kustomizeDir)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s uninstall:\n%s", env.method, out)
	waitFor(t, "nothing of Diskplane left", uninstallTimeout, func(ctx context.Context) (bool, string, error) {
		left, err := leftovers(ctx, mapper, installed)
		if err != nil || len(left) > 0 {
			return false, fmt.Sprintf("%d left: %s", len(left), strings.Join(left, "; ")), err
		}
		return true, "", nil
	})
	t.Logf("%s uninstall to nothing left: %s", env.method, time.Since(start).Round(100*time.Millisecond))
	leases, err := env.client.CoordinationV1().Leases(env.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sanitized := strings.NewReplacer(".", "-", "/", "-").Replace(env.driverName)
	for _, l := range leases.Items {
		switch {
		case strings.Contains(l.Name, sanitized):
			t.Logf("left by the sidecars: Lease %s/%s", l.Namespace, l.Name)
		case l.Name == env.driverName+"-node-witness":
			t.Logf("left by the node witness: Lease %s/%s", l.Namespace, l.Name)
		}
	}
}

// installedObjects lists what the install made, read from the tool that
// made it: Helm's record of the release, or the overlay rendered again.
func installedObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var manifest string
	var err error
	switch env.method {
	case byHelm:
		manifest, err = helm(t.Context(), "get", "manifest", env.release, "--namespace", env.namespace)
	case byKustomize:
		manifest, err = kubectl(t.Context(), "kustomize", env.kustomizeDir)
	}
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(manifest), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("the install's manifest: %v", err)
		}
		if obj != nil {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
	if len(objs) == 0 {
		t.Fatalf("the %s install's manifest lists no object", env.method)
	}
	return objs
}

func describe(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", o.GetKind(), ns, o.GetName())
	}
	return o.GetKind() + " " + o.GetName()
}

// get reads the object the manifest describes from the cluster.
func get(ctx context.Context, mapper meta.RESTMapper, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", describe(o), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := o.GetNamespace()
		if ns == "" {
			ns = env.namespace
		}
		return env.dynamic.Resource(m.Resource).Namespace(ns).Get(ctx, o.GetName(), metav1.GetOptions{})
	}
	return env.dynamic.Resource(m.Resource).Get(ctx, o.GetName(), metav1.GetOptions{})
}

// leftovers describes every trace of Diskplane still in the cluster.
func leftovers(ctx context.Context, mapper meta.RESTMapper, installed []*unstructured.Unstructured) ([]string, error) {
	var left []string
	seen := map[string]bool{}
	add := func(what string) {
		if !seen[what] {
			seen[what] = true
			left = append(left, what)
		}
	}
	for _, o := range installed {
		_, err := get(ctx, mapper, o)
		switch {
		case err == nil:
			add(describe(o))
		case !apierrors.IsNotFound(err):
			return nil, err
		}
	}
	labelled, err := labelledObjects(ctx)
	if err != nil {
		return nil, err
	}
	for _, what := range labelled {
		add(what)
	}
	named, err := driverObjects(ctx)
	if err != nil {
		return nil, err
	}
	for _, what := range named {
		add(what)
	}
	if registered, err := driverRegistered(ctx); err != nil {
		return nil, err
	} else if registered {
		add("CSINode " + env.node + " lists " + env.driverName)
	}
	// The kubelet notes each registered driver's node ID on the Node, and
	// takes it away when the driver goes.
	node, err := env.client.CoreV1().Nodes().Get(ctx, env.node, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if ids := node.Annotations[nodeIDAnnotation]; strings.Contains(ids, `"`+env.driverName+`"`) {
		add(fmt.Sprintf("Node %s annotation %s=%s", env.node, nodeIDAnnotation, ids))
	}
	return left, nil
}

// labelledObjects lists every object of every kind the API server can list,
// in every namespace, that carries the chart's app.kubernetes.io/name label.
func labelledObjects(ctx context.Context) ([]string, error) {
	lists, err := env.client.Discovery().ServerPreferredResources()
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	var found []string
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			items, err := env.dynamic.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{LabelSelector: appSelector})
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", r.Name, err)
			}
			for _, o := range items.Items {
				found = append(found, fmt.Sprintf("%s (labelled %s)", describe(&o), appSelector))
			}
		}
	}
	return found, nil
}

// clusterKinds are the cluster-wide kinds the chart makes, and how an
// object of each belongs to the driver: a field naming the driver, or
// (field empty) a name with "diskplane" in it.
var clusterKinds = []struct {
	kind  string
	res   schema.GroupVersionResource
	field []string
}{
	{"CSIDriver", schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "csidrivers"}, []string{"metadata", "name"}},
	{"StorageClass", schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}, []string{"provisioner"}},
	{"VolumeAttributesClass", schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "volumeattributesclasses"}, []string{"driverName"}},
	{"VolumeSnapshotClass", schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}, []string{"driver"}},
	{"ClusterRole", schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, nil},
	{"ClusterRoleBinding", schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, nil},
	{"ValidatingAdmissionPolicy", schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}, nil},
	{"ValidatingAdmissionPolicyBinding", schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}, nil},
	{"PriorityClass", schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1", Resource: "priorityclasses"}, nil},
}

// driverObjects lists the cluster-wide objects that belong to the driver by
// what they say rather than by label (clusterKinds), and Helm's records of
// the release (Secrets labelled owner=helm).
func driverObjects(ctx context.Context) ([]string, error) {
	var found []string
	for _, k := range clusterKinds {
		list, err := env.dynamic.Resource(k.res).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			// A kind this cluster does not serve (no snapshot CRDs) holds nothing.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", k.res.Resource, err)
		}
		for _, o := range list.Items {
			var ours bool
			if k.field == nil {
				ours = strings.Contains(o.GetName(), "diskplane")
			} else {
				v, _, _ := unstructured.NestedString(o.Object, k.field...)
				ours = v == env.driverName
			}
			if ours {
				found = append(found, k.kind+" "+o.GetName())
			}
		}
	}
	records, err := env.client.CoreV1().Secrets(env.namespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + env.release})
	if err != nil {
		return nil, err
	}
	for _, s := range records.Items {
		found = append(found, "Helm release record Secret "+env.namespace+"/"+s.Name)
	}
	return found, nil
}
