//go:build vm

package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// cluster is the local cluster's API server as the VM reaches it, and the
// two namespaces of one run (two tenants) with their service accounts and
// pods.
type cluster struct {
	t      *testing.T
	client kubernetes.Interface
	// namespace is the first tenant's, with the service accounts db and
	// web; tenant is the second's, with a service account db of its own.
	namespace, tenant string
	pods              map[string]*corev1.Pod // by "<namespace>/<service account>"
}

// newCluster connects to the local cluster (hack/vm/identity.sh passes its
// kubeconfig) and makes the two namespaces, each service account with a
// pod. The pods never run (no node matches them): the API server binds
// tokens to them, which is all the test needs of them.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	path := os.Getenv("DISKPLANE_VM_KUBECONFIG")
	testutil.RequireCluster(t, path != "", "needs the local Kubernetes cluster's API server for real service-account tokens",
		"run `make test-vm-identity` (it brings the cluster up)")
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := time.Now().UnixNano() % 1e6
	c := &cluster{t: t, client: client, namespace: fmt.Sprintf("vm-identity-%d", run), tenant: fmt.Sprintf("vm-tenant-%d", run),
		pods: map[string]*corev1.Pod{}}
	ctx := context.Background()
	for ns, accounts := range map[string][]string{c.namespace: {"db", "web"}, c.tenant: {"db"}} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
				t.Errorf("delete namespace %s: %v", ns, err)
			}
		})
		for _, sa := range accounts {
			if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: sa + "-0"},
				Spec: corev1.PodSpec{
					ServiceAccountName: sa, AutomountServiceAccountToken: new(false),
					NodeSelector: map[string]string{"diskplane.io/test": "nowhere"},
					Containers:   []corev1.Container{{Name: "app", Image: "localhost/pause:local"}},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c.pods[ns+"/"+sa] = pod
		}
	}
	return c
}

// setTokenPlace makes the node plugin's CSIDriver (its own name, which
// hack/vm/nvme.sh gives it) ask for tokens for STS's audience, passed in
// the request's secrets or its volume context, as an operator sets it;
// the test's end deletes it.
func (c *cluster) setTokenPlace(inSecrets bool) {
	c.t.Helper()
	name := os.Getenv("DISKPLANE_VM_DRIVER_NAME")
	if name == "" {
		c.t.Fatal("DISKPLANE_VM_DRIVER_NAME is not set: run make test-vm-identity")
	}
	drivers := c.client.StorageV1().CSIDrivers()
	spec := storagev1.CSIDriverSpec{AttachRequired: new(true), PodInfoOnMount: new(true), RequiresRepublish: new(true),
		TokenRequests: []storagev1.TokenRequest{{Audience: audience}}, ServiceAccountTokenInSecrets: new(inSecrets)}
	d, err := drivers.Get(context.Background(), name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = drivers.Create(context.Background(), &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
		c.t.Cleanup(func() {
			if err := drivers.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
				c.t.Errorf("delete CSIDriver %s: %v", name, err)
			}
		})
	case err == nil:
		d.Spec.ServiceAccountTokenInSecrets = new(inSecrets)
		_, err = drivers.Update(context.Background(), d, metav1.UpdateOptions{})
	}
	if err != nil {
		c.t.Fatalf("CSIDriver %s: %v", name, err)
	}
}

// token requests a token of the first tenant's serviceAccount's pod.
func (c *cluster) token(serviceAccount string) string {
	c.t.Helper()
	return c.tokenIn(c.namespace, serviceAccount)
}

// tokenIn requests a token of serviceAccount's pod in namespace for STS's
// audience, as the kubelet does for a CSIDriver's tokenRequests, and
// renders it as the kubelet passes it (csi.storage.k8s.io/serviceAccount.tokens).
func (c *cluster) tokenIn(namespace, serviceAccount string) string {
	c.t.Helper()
	pod := c.pods[namespace+"/"+serviceAccount]
	tr, err := c.client.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{audience}, ExpirationSeconds: new(int64(tokenTTLSs)),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	b, err := json.Marshal(map[string]authenticationv1.TokenRequestStatus{audience: tr.Status})
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b)
}

// issuer reads the API server's service-account issuer and its keys.
func (c *cluster) issuer() (string, json.RawMessage) {
	c.t.Helper()
	rest := c.client.CoreV1().RESTClient()
	discovery, err := rest.Get().AbsPath("/.well-known/openid-configuration").DoRaw(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	var doc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(discovery, &doc); err != nil || doc.Issuer == "" {
		c.t.Fatalf("the API server's discovery document: %v", err)
	}
	jwks, err := rest.Get().AbsPath("/openid/v1/jwks").DoRaw(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	return doc.Issuer, jwks
}

// waitForEvent waits until an event with reason, its message holding
// text, is recorded on the first tenant's pod.
func (c *cluster) waitForEvent(pod, reason, text string) {
	c.t.Helper()
	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod, "reason": reason}.AsSelector().String()
	deadline := time.Now().Add(time.Minute)
	for {
		events, err := c.client.CoreV1().Events(c.namespace).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			c.t.Fatal(err)
		}
		for _, e := range events.Items {
			if strings.Contains(e.Message, text) {
				c.t.Logf("event on pod %s: %s %s", pod, e.Reason, e.Message)
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no %s event on pod %s/%s holding %q after a minute (%d events of that reason)", reason, c.namespace, pod, text, len(events.Items))
		}
		time.Sleep(time.Second)
	}
}
