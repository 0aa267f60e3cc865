package metadata

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

func TestParseProviderID(t *testing.T) {
	tests := []struct {
		in       string
		wantZone string
		wantID   string
		wantErr  bool
	}{
		{in: "aws:///us-east-1a/i-0123456789abcdef0", wantZone: "us-east-1a", wantID: "i-0123456789abcdef0"},
		{in: "aws:///us-west-2-lax-1a/i-0abc", wantZone: "us-west-2-lax-1a", wantID: "i-0abc"},
		{in: "aws:////i-0abc", wantID: "i-0abc"},
		{in: "aws:///i-0abc", wantID: "i-0abc"},
		{in: "aws://i-ABC123", wantID: "i-ABC123"}, // an EC2-compatible cloud's ID style
		{in: "", wantErr: true},
		{in: "gce://project/zone/name", wantErr: true},
		{in: "aws:///us-east-1a/", wantErr: true},
		{in: "aws:///us-east-1a/vol-0abc", wantErr: true},
		{in: "aws:///us-east-1a/i-", wantErr: true},
		{in: "aws:///us-east-1a/i-0abc/extra", wantErr: true},
		{in: "aws:///us-east-1a/i-0a;b", wantErr: true},
		{in: "AWS:///us-east-1a/i-0abc", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			zone, id, err := ParseProviderID(tc.in)
			if tc.wantErr {
				if !errors.Is(err, errBadProviderID) {
					t.Fatalf("ParseProviderID(%q) = %q, %q, %v; want errBadProviderID", tc.in, zone, id, err)
				}
				return
			}
			if err != nil || zone != tc.wantZone || id != tc.wantID {
				t.Fatalf("ParseProviderID(%q) = %q, %q, %v; want %q, %q", tc.in, zone, id, err, tc.wantZone, tc.wantID)
			}
		})
	}
}

// testNode is an EKS-style node with the provider ID and every label.
func testNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			labelInstanceType: "m5.large",
			labelZone:         "us-east-1a",
			labelRegion:       "us-east-1",
			labelZoneID:       "use1-az6",
		}},
		Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-0123456789abcdef0"},
	}
}

func TestInstanceFromNode(t *testing.T) {
	full := &Instance{ID: "i-0123456789abcdef0", Type: "m5.large", Region: "us-east-1", Zone: "us-east-1a",
		ZoneID: "use1-az6", NetworkInterfaces: 1}
	tests := []struct {
		name    string
		edit    func(*corev1.Node)
		want    *Instance
		wantErr []string // substrings the error must contain
	}{
		{name: "every label", want: full},
		{
			name: "zone from the provider ID, region from the zone, no zone ID",
			edit: func(n *corev1.Node) {
				delete(n.Labels, labelZone)
				delete(n.Labels, labelRegion)
				delete(n.Labels, labelZoneID)
			},
			want: &Instance{ID: full.ID, Type: "m5.large", Region: "us-east-1", Zone: "us-east-1a", NetworkInterfaces: 1},
		},
		{
			name: "GovCloud region derived from the zone",
			edit: func(n *corev1.Node) {
				delete(n.Labels, labelRegion)
				n.Labels[labelZone] = "us-gov-west-1b"
				n.Spec.ProviderID = "aws:////i-0abc"
			},
			want: &Instance{ID: "i-0abc", Type: "m5.large", Region: "us-gov-west-1", Zone: "us-gov-west-1b",
				ZoneID: "use1-az6", NetworkInterfaces: 1},
		},
		{
			name: "a local zone's region is not guessed",
			edit: func(n *corev1.Node) {
				delete(n.Labels, labelRegion)
				n.Labels[labelZone] = "us-west-2-lax-1a"
				n.Spec.ProviderID = "aws:///us-west-2-lax-1a/i-0abc"
			},
			wantErr: []string{"lacks label " + labelRegion},
		},
		{
			name:    "zone label and provider ID disagree",
			edit:    func(n *corev1.Node) { n.Labels[labelZone] = "us-east-1b" },
			wantErr: []string{"disagrees", "us-east-1b", "us-east-1a"},
		},
		{
			name: "every required label missing",
			edit: func(n *corev1.Node) {
				n.Labels = nil
				n.Spec.ProviderID = "aws:///i-0abc"
			},
			wantErr: []string{labelInstanceType, labelZone, labelRegion},
		},
		{
			name:    "no provider ID",
			edit:    func(n *corev1.Node) { n.Spec.ProviderID = "" },
			wantErr: []string{"providerID"},
		},
		{
			name:    "a provider ID of another cloud",
			edit:    func(n *corev1.Node) { n.Spec.ProviderID = "gce://p/us-central1-a/n" },
			wantErr: []string{"gce://p/us-central1-a/n"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := testNode("node-1")
			if tc.edit != nil {
				tc.edit(node)
			}
			got, err := instanceFromNode(node)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("got %+v, want an error", got)
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
			assertInstance(t, got, tc.want)
		})
	}
}

func TestKubernetesSource(t *testing.T) {
	tests := []struct {
		name     string
		nodeName string
		env      string
		wantID   string
		wantErr  string
	}{
		{name: "node name from the options", nodeName: "node-1", wantID: "i-0123456789abcdef0"},
		{name: "node name from the environment", env: "node-1", wantID: "i-0123456789abcdef0"},
		{name: "the options win over the environment", nodeName: "node-1", env: "other", wantID: "i-0123456789abcdef0"},
		{name: "no node name", wantErr: NodeNameEnv},
		{name: "no such node", nodeName: "node-2", wantErr: `get node "node-2"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(NodeNameEnv, tc.env)
			client := fake.NewClientset(testNode("node-1"))
			got, err := fromKubernetes(t.Context(), Options{KubeClient: client, NodeName: tc.nodeName})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tc.wantID {
				t.Fatalf("ID = %q, want %q", got.ID, tc.wantID)
			}
		})
	}
}

func TestKubernetesSourceNotFoundKeepsTheAPIError(t *testing.T) {
	client := fake.NewClientset()
	_, err := fromKubernetes(t.Context(), Options{KubeClient: client, NodeName: "gone"})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("err = %v, want the API's NotFound wrapped", err)
	}
}

func TestKubernetesSourceOutsideACluster(t *testing.T) {
	// Without a client, the source builds one from the pod's service
	// account, which a test process does not have.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	_, err := fromKubernetes(t.Context(), Options{NodeName: "node-1"})
	if !errors.Is(err, rest.ErrNotInCluster) {
		t.Fatalf("err = %v, want rest.ErrNotInCluster", err)
	}
}
