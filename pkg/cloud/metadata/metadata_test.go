package metadata

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	emuimds "github.com/diskplane/diskplane/pkg/emulator/imds"
)

func TestParseSources(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "imds,kubernetes", want: []string{"imds", "kubernetes"}},
		{in: "kubernetes", want: []string{"kubernetes"}},
		{in: " kubernetes , imds ", want: []string{"kubernetes", "imds"}},
		{in: "imds,,", want: []string{"imds"}},
		{in: "", wantErr: true},
		{in: " , ", wantErr: true},
		{in: "imds,imds", wantErr: true},
		{in: "imds,metadata-labeler", wantErr: true},
		{in: "IMDS", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSources(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseSources(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParseSources(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// countingIMDS serves the emulated instance (or, when down, nothing) and
// counts the requests it receives.
func countingIMDS(t *testing.T, down bool) (endpoint string, requests *atomic.Int32) {
	t.Helper()
	if down {
		return deadEndpoint(t), &atomic.Int32{}
	}
	requests = &atomic.Int32{}
	srv := serveIMDS(t, emulatedInstance(), emuimds.Options{RequireToken: true},
		func(http.ResponseWriter, *http.Request) bool { requests.Add(1); return false })
	return srv.URL, requests
}

func TestGet(t *testing.T) {
	tests := []struct {
		name         string
		sources      []string
		imdsDown     bool
		noNode       bool
		wantSource   string
		wantIMDSUsed bool
		wantKubeUsed bool
		wantErr      []string // substrings of the error; the error must wrap ErrUnavailable
	}{
		{
			name: "IMDS answers first", wantSource: SourceIMDS, wantIMDSUsed: true,
		},
		{
			name: "IMDS down: the Node object answers", imdsDown: true,
			wantSource: SourceKubernetes, wantKubeUsed: true,
		},
		{
			name: "Kubernetes first", sources: []string{SourceKubernetes, SourceIMDS},
			wantSource: SourceKubernetes, wantKubeUsed: true,
		},
		{
			name: "Kubernetes first but its node is missing: IMDS answers", sources: []string{SourceKubernetes, SourceIMDS},
			noNode: true, wantSource: SourceIMDS, wantIMDSUsed: true, wantKubeUsed: true,
		},
		{
			name: "IMDS only, and down", sources: []string{SourceIMDS}, imdsDown: true,
			wantErr: []string{"imds: ", "hop limit"},
		},
		{
			name: "nothing answers: the error names both sources and why", imdsDown: true, noNode: true,
			wantKubeUsed: true,
			wantErr:      []string{"imds: read the instance identity document", `kubernetes: get node "node-1"`, "not found"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			endpoint, imdsRequests := countingIMDS(t, tc.imdsDown)
			client := fake.NewClientset()
			if !tc.noNode {
				client = fake.NewClientset(testNode("node-1"))
			}
			got, err := Get(t.Context(), Options{
				Sources: tc.sources, IMDSEndpoint: endpoint, KubeClient: client, NodeName: "node-1",
			})
			if imdsUsed := imdsRequests.Load() > 0; imdsUsed != tc.wantIMDSUsed {
				t.Errorf("IMDS used = %v, want %v", imdsUsed, tc.wantIMDSUsed)
			}
			if kubeUsed := len(client.Actions()) > 0; kubeUsed != tc.wantKubeUsed {
				t.Errorf("Kubernetes API used = %v, want %v", kubeUsed, tc.wantKubeUsed)
			}
			if len(tc.wantErr) > 0 {
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("err = %v, want ErrUnavailable", err)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("err = %v; want it to mention %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Source != tc.wantSource || got.ID != "i-0123456789abcdef0" || got.Zone != "us-east-1a" {
				t.Fatalf("got %+v, want instance i-0123456789abcdef0 in us-east-1a from %s", got, tc.wantSource)
			}
		})
	}
}

func TestGetKeepsEachSourcesError(t *testing.T) {
	t.Setenv(NodeNameEnv, "")
	_, err := Get(t.Context(), Options{Sources: []string{SourceKubernetes}, KubeClient: fake.NewClientset()})
	var se *sourceError
	if !errors.As(err, &se) || se.source != SourceKubernetes {
		t.Fatalf("err = %v, want the Kubernetes source's error inside", err)
	}
}

func TestGetRejectsBadSources(t *testing.T) {
	for _, sources := range [][]string{{"imds", "nope"}, {"kubernetes", "kubernetes"}} {
		_, err := Get(t.Context(), Options{Sources: sources, KubeClient: fake.NewClientset(), NodeName: "node-1"})
		if err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("Sources %v: err = %v, want a configuration error", sources, err)
		}
	}
}

func TestGetStopsWhenTheContextEnds(t *testing.T) {
	endpoint, _ := countingIMDS(t, true)
	client := fake.NewClientset(testNode("node-1"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Get(ctx, Options{IMDSEndpoint: endpoint, KubeClient: client, NodeName: "node-1"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := len(client.Actions()); n != 0 {
		t.Fatalf("the Kubernetes source was tried %d times after the context ended", n)
	}
}
