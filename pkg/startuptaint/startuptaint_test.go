package startuptaint

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	testDriver = "ebs.csi.diskplane.io"
	testNode   = "node-a"
)

var (
	startupTaint  = corev1.Taint{Key: Key(testDriver), Effect: corev1.TaintEffectNoExecute}
	otherTaint    = corev1.Taint{Key: "dedicated", Value: "storage", Effect: corev1.TaintEffectNoSchedule}
	notReadyTaint = corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}
)

func node(name string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"keep": "me"}},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-0123456789abcdef0", Taints: taints},
	}
}

// fastConfig is a Config that is ready at once and whose waits are short,
// so failure paths finish quickly; the tests assert outcomes, never
// durations.
func fastConfig(client *fake.Clientset) Config {
	return Config{
		Client: client, NodeName: testNode, DriverName: testDriver,
		Ready:         func(context.Context) (bool, error) { return true, nil },
		ReadyInterval: time.Millisecond, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
	}
}

// taintsOf reads a node's taints from the fake's store, past any reactor a
// test installed.
func taintsOf(t *testing.T, client *fake.Clientset, name string) []corev1.Taint {
	t.Helper()
	n, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", name)
	if err != nil {
		t.Fatalf("get node %s: %v", name, err)
	}
	return n.(*corev1.Node).Spec.Taints
}

func patches(client *fake.Clientset) []k8stesting.PatchAction {
	var out []k8stesting.PatchAction
	for _, a := range client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			out = append(out, p)
		}
	}
	return out
}

func TestKey(t *testing.T) {
	if got := Key("ebs.csi.aws.com"); got != "ebs.csi.aws.com/agent-not-ready" {
		t.Fatalf("Key = %q", got)
	}
}

func TestRunRemovesOnlyTheStartupTaint(t *testing.T) {
	tests := []struct {
		name        string
		taints      []corev1.Taint
		want        []corev1.Taint
		wantPatches int
	}{
		{name: "only the startup taint", taints: []corev1.Taint{startupTaint}, want: nil, wantPatches: 1},
		{name: "startup taint among others", taints: []corev1.Taint{otherTaint, startupTaint, notReadyTaint},
			want: []corev1.Taint{otherTaint, notReadyTaint}, wantPatches: 1},
		{name: "same key with another effect",
			taints: []corev1.Taint{{Key: Key(testDriver), Effect: corev1.TaintEffectNoSchedule}, otherTaint},
			want:   []corev1.Taint{otherTaint}, wantPatches: 1},
		{name: "no taint at all: nothing written", taints: nil, want: nil, wantPatches: 0},
		{name: "other taints only: nothing written", taints: []corev1.Taint{otherTaint}, want: []corev1.Taint{otherTaint}},
		{name: "another driver's taint stays", taints: []corev1.Taint{{Key: Key("ebs.csi.aws.com"), Effect: corev1.TaintEffectNoExecute}},
			want: []corev1.Taint{{Key: Key("ebs.csi.aws.com"), Effect: corev1.TaintEffectNoExecute}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(node(testNode, tc.taints...), node("node-b", startupTaint))
			if err := Run(context.Background(), fastConfig(client)); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := taintsOf(t, client, testNode); !slices.Equal(got, tc.want) {
				t.Errorf("taints = %v, want %v", got, tc.want)
			}
			if got := len(patches(client)); got != tc.wantPatches {
				t.Errorf("%d patches, want %d", got, tc.wantPatches)
			}
			// Another node is never touched, and nothing else on this one changes.
			if got := taintsOf(t, client, "node-b"); !slices.Equal(got, []corev1.Taint{startupTaint}) {
				t.Errorf("node-b taints = %v, want its startup taint kept", got)
			}
			n, _ := client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
			if n.Labels["keep"] != "me" || n.Spec.ProviderID == "" {
				t.Errorf("node changed beyond its taints: %+v", n)
			}
			for _, p := range patches(client) {
				if p.GetName() != testNode {
					t.Errorf("patched node %s", p.GetName())
				}
			}
		})
	}
}

func TestRunIsIdempotent(t *testing.T) {
	client := fake.NewClientset(node(testNode, startupTaint, otherTaint))
	for i := range 3 {
		if err := Run(context.Background(), fastConfig(client)); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	if got := len(patches(client)); got != 1 {
		t.Fatalf("%d patches over three runs, want 1", got)
	}
	if got := taintsOf(t, client, testNode); !slices.Equal(got, []corev1.Taint{otherTaint}) {
		t.Fatalf("taints = %v", got)
	}
}

func TestRunWaitsUntilReady(t *testing.T) {
	client := fake.NewClientset(node(testNode, startupTaint))
	var asked atomic.Int32
	cfg := fastConfig(client)
	cfg.Ready = func(context.Context) (bool, error) {
		switch asked.Add(1) {
		case 1:
			return false, nil
		case 2:
			return false, errors.New("kubelet has not called yet")
		default:
			// Until Ready says yes, the taint must still be there.
			if got := taintsOf(t, client, testNode); !slices.Equal(got, []corev1.Taint{startupTaint}) {
				t.Errorf("taint removed before ready: %v", got)
			}
			return true, nil
		}
	}
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if asked.Load() != 3 {
		t.Errorf("Ready asked %d times, want 3", asked.Load())
	}
	if got := taintsOf(t, client, testNode); len(got) != 0 {
		t.Errorf("taints = %v, want none", got)
	}
}

func TestRunNeverReadyStopsWithContext(t *testing.T) {
	client := fake.NewClientset(node(testNode, startupTaint))
	cfg := fastConfig(client)
	ctx, cancel := context.WithCancel(context.Background())
	var asked atomic.Int32
	cfg.Ready = func(context.Context) (bool, error) {
		if asked.Add(1) == 5 {
			cancel()
		}
		return false, nil
	}
	err := Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if got := taintsOf(t, client, testNode); !slices.Equal(got, []corev1.Taint{startupTaint}) {
		t.Errorf("taints = %v, want the startup taint kept", got)
	}
}

// failFirst makes the first n calls of verb on nodes fail with err.
func failFirst(client *fake.Clientset, verb string, n int32, err error) *atomic.Int32 {
	var calls atomic.Int32
	client.PrependReactor(verb, "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) <= n {
			return true, nil, err
		}
		return false, nil, nil
	})
	return &calls
}

func TestRunRetriesFailures(t *testing.T) {
	gr := schema.GroupResource{Resource: "nodes"}
	tests := []struct {
		name string
		verb string
		err  error
	}{
		{name: "conflict on patch", verb: "patch", err: apierrors.NewConflict(gr, testNode, errors.New("changed"))},
		{name: "API server unavailable", verb: "get", err: apierrors.NewServiceUnavailable("starting")},
		{name: "node not found yet", verb: "get", err: apierrors.NewNotFound(gr, testNode)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(node(testNode, startupTaint, otherTaint))
			calls := failFirst(client, tc.verb, 3, tc.err)
			if err := Run(context.Background(), fastConfig(client)); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if calls.Load() < 4 {
				t.Errorf("%s called %d times, want the 3 failures and a success", tc.verb, calls.Load())
			}
			if got := taintsOf(t, client, testNode); !slices.Equal(got, []corev1.Taint{otherTaint}) {
				t.Errorf("taints = %v", got)
			}
		})
	}
}

// A cluster that forbids the removal gets one attempt, not a loop.
func TestRunStopsWhenForbidden(t *testing.T) {
	gr := schema.GroupResource{Resource: "nodes"}
	tests := []struct {
		name      string
		verb      string
		resource  string
		wantCalls int32
	}{
		{name: "no patch permission, or the admission policy refuses", verb: "patch", resource: "nodes", wantCalls: 1},
		{name: "no get permission", verb: "get", resource: "nodes", wantCalls: 1},
		{name: "CSINode not readable", verb: "get", resource: "csinodes", wantCalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(node(testNode, startupTaint), csiNode(testNode, testDriver))
			var calls atomic.Int32
			client.PrependReactor(tc.verb, tc.resource, func(k8stesting.Action) (bool, runtime.Object, error) {
				calls.Add(1)
				return true, nil, apierrors.NewForbidden(gr, testNode, errors.New("denied"))
			})
			cfg := fastConfig(client)
			if tc.resource == "csinodes" {
				cfg.Ready = nil
			}
			err := Run(context.Background(), cfg)
			if !apierrors.IsForbidden(err) {
				t.Fatalf("Run = %v, want the Forbidden error", err)
			}
			if calls.Load() != tc.wantCalls {
				t.Errorf("%s %s called %d times, want %d", tc.verb, tc.resource, calls.Load(), tc.wantCalls)
			}
			if got := taintsOf(t, client, testNode); !slices.Equal(got, []corev1.Taint{startupTaint}) {
				t.Errorf("taints = %v", got)
			}
		})
	}
}

func TestRunGivesUpWhenContextEnds(t *testing.T) {
	client := fake.NewClientset(node(testNode, startupTaint))
	ctx, cancel := context.WithCancel(context.Background())
	calls := failFirst(client, "patch", 1<<30, apierrors.NewServiceUnavailable("down"))
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if calls.Load() >= 3 {
			cancel()
		}
		return false, nil, nil
	})
	err := Run(ctx, fastConfig(client))
	if !errors.Is(err, context.Canceled) || !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("Run = %v, want context.Canceled with the last API error", err)
	}
	if got := taintsOf(t, client, testNode); !slices.Equal(got, []corev1.Taint{startupTaint}) {
		t.Errorf("taints = %v, want the startup taint kept", got)
	}
}

// A taint another writer adds between our read and our write must survive:
// the patch's test operation fails and the next attempt reads again.
func TestRunKeepsConcurrentChanges(t *testing.T) {
	client := fake.NewClientset(node(testNode, startupTaint))
	var raced atomic.Bool
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if raced.CompareAndSwap(false, true) {
			n, err := client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", testNode)
			if err != nil {
				return true, nil, err
			}
			changed := n.(*corev1.Node).DeepCopy()
			changed.Spec.Taints = append(changed.Spec.Taints, otherTaint)
			if err := client.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, changed, ""); err != nil {
				return true, nil, err
			}
		}
		return false, nil, nil
	})
	if err := Run(context.Background(), fastConfig(client)); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := taintsOf(t, client, testNode); !slices.Equal(got, []corev1.Taint{otherTaint}) {
		t.Fatalf("taints = %v, want the concurrently added taint kept and the startup taint gone", got)
	}
	if got := len(patches(client)); got != 2 {
		t.Errorf("%d patches, want the refused one and the retry", got)
	}
}

func TestRunRejectsIncompleteConfig(t *testing.T) {
	client := fake.NewClientset()
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "no node name", cfg: Config{Client: client, DriverName: testDriver}},
		{name: "no driver name", cfg: Config{Client: client, NodeName: testNode}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := Run(context.Background(), tc.cfg); err == nil {
				t.Fatal("Run succeeded")
			}
			if len(client.Actions()) != 0 {
				t.Errorf("API calls made: %v", client.Actions())
			}
		})
	}
}
