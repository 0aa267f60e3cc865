//go:build vm

package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/emulator/admin"
	"github.com/diskplane/diskplane/pkg/testutil"
)

const (
	account    = "123456789012"
	dbRole     = "arn:aws:iam::123456789012:role/shop-db"
	ctrlRole   = "arn:aws:iam::123456789012:role/diskplane-controller"
	audience   = "sts.amazonaws.com"
	keyID      = "workload-volumes"
	tokenTTLSs = 600 // the API server's minimum
)

// cluster is the local cluster's API server as the VM reaches it, and the
// namespace of one run with its service accounts and pods.
type cluster struct {
	t         *testing.T
	client    kubernetes.Interface
	namespace string
	pods      map[string]*corev1.Pod // by service account
}

// newCluster connects to the local cluster (hack/vm/identity.sh passes its
// kubeconfig) and makes a namespace with the service accounts db and web
// and a pod of each. The pods never run (no node matches them): the API
// server binds tokens to them, which is all the test needs of them.
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
	c := &cluster{t: t, client: client, namespace: fmt.Sprintf("vm-identity-%d", time.Now().UnixNano()%1e6), pods: map[string]*corev1.Pod{}}
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := client.CoreV1().Namespaces().Delete(context.Background(), c.namespace, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", c.namespace, err)
		}
	})
	for _, sa := range []string{"db", "web"} {
		if _, err := client.CoreV1().ServiceAccounts(c.namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod, err := client.CoreV1().Pods(c.namespace).Create(ctx, &corev1.Pod{
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
		c.pods[sa] = pod
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

// token requests a token of serviceAccount's pod for STS's audience, as
// the kubelet does for a CSIDriver's tokenRequests, and renders it as the
// kubelet passes it (csi.storage.k8s.io/serviceAccount.tokens).
func (c *cluster) token(serviceAccount string) string {
	c.t.Helper()
	pod := c.pods[serviceAccount]
	tr, err := c.client.CoreV1().ServiceAccounts(c.namespace).CreateToken(context.Background(), serviceAccount, &authenticationv1.TokenRequest{
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

// keyPolicy lets the controller make keys, and the shop-db role decrypt
// them when podMayDecrypt.
func keyPolicy(podMayDecrypt bool) map[string]any {
	statements := []any{map[string]any{"Effect": "Allow", "Principal": map[string]any{"AWS": ctrlRole},
		"Action": []string{"kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncrypt*"}, "Resource": "*"}}
	if podMayDecrypt {
		statements = append(statements, map[string]any{"Effect": "Allow", "Principal": map[string]any{"AWS": dbRole},
			"Action": "kms:Decrypt", "Resource": "*"})
	}
	return map[string]any{"Version": "2012-10-17", "Statement": statements}
}

// sample reads one sample of a Prometheus text page: the sum over the
// series of name whose labels include every given pair.
func sample(t *testing.T, url, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	total := 0.0
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		matches := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(line, labels[i]+`="`+labels[i+1]+`"`) {
				matches = false
			}
		}
		if !matches {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		total += v
	}
	return total
}

// TestWorkloadIdentity unlocks a volume whose key KMS wraps with real
// service-account tokens of the local cluster, on the node VM's kernel:
// the emulator's STS verifies each token against the API server's own
// keys, KMS unwraps the key for the pod's role, the node opens and mounts
// the LUKS2 volume. A pod of a service account the role does not trust is
// refused by STS; a pod whose role the key policy stops naming is refused
// by KMS at its next republish, keeping its mount; the last unpublish
// closes the volume. The node takes tokens only from where the plugin's
// CSIDriver says the kubelet puts them, following it as it changes: the db
// pod's token planted in the web pod's other field unlocks nothing.
func TestWorkloadIdentity(t *testing.T) {
	r := newRig(t)
	c := newCluster(t)
	adminURL := os.Getenv("DISKPLANE_VM_ADMIN")
	emu := &admin.Client{URL: adminURL}
	setKeyPolicy := func(podMayDecrypt bool) {
		t.Helper()
		if err := emu.SetKMSKey(t.Context(), keyID, map[string]any{"policy": keyPolicy(podMayDecrypt)}); err != nil {
			t.Fatal(err)
		}
	}
	issuer, jwks := c.issuer()
	host := strings.TrimPrefix(issuer, "https://")
	if err := emu.SetIAM(t.Context(), map[string]any{
		"oidcProviders": []any{map[string]any{"url": issuer, "clientIds": []string{audience}, "jwks": jwks}},
		"roles": []any{map[string]any{"name": "shop-db", "trustPolicy": map[string]any{"Statement": []any{map[string]any{
			"Effect": "Allow", "Principal": map[string]any{"Federated": "arn:aws:iam::" + account + ":oidc-provider/" + host},
			"Action": "sts:AssumeRoleWithWebIdentity",
			"Condition": map[string]any{"StringEquals": map[string]any{
				host + ":sub": "system:serviceaccount:" + c.namespace + ":db", host + ":aud": audience}},
		}}}}},
		// The controller on the host signs its KMS calls with these (hack/vm/nvme.sh).
		"accessKeys": []any{map[string]any{"accessKeyId": "vm", "secretAccessKey": "vm", "principal": ctrlRole}},
	}); err != nil {
		t.Fatal(err)
	}
	setKeyPolicy(true)
	stsCalls := func() float64 {
		return sample(t, adminURL+"/metrics", "ec2_emulator_service_requests_total", "service", "sts", "action", "AssumeRoleWithWebIdentity")
	}

	resp, err := r.ctrl.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
		Name: "identity-" + c.namespace, CapacityRange: &csi.CapacityRange{RequiredBytes: gib},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap},
		Parameters: map[string]string{"type": "gp3", "nodeEncryption": "luks2", "nodeEncryptionKeySource": "kms",
			"nodeEncryptionKmsKeyId": keyID, "nodeEncryptionRoleArn": dbRole},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: r.zone}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	v := &volume{name: "identity", id: resp.GetVolume().GetVolumeId()}
	vc := resp.GetVolume().GetVolumeContext()
	t.Cleanup(func() {
		_, _ = r.ctrl.ControllerUnpublishVolume(context.Background(), &csi.ControllerUnpublishVolumeRequest{VolumeId: v.id, NodeId: r.nodeID})
		if _, err := r.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
			t.Errorf("delete %s: %v", v.id, err)
		}
	})
	r.attach(v)
	staging := r.staging(v)
	if _, err := r.node.NodeStageVolume(ctx(t), &csi.NodeStageVolumeRequest{VolumeId: v.id, StagingTargetPath: staging,
		VolumeCapability: mountCap, PublishContext: v.publish, VolumeContext: vc}); err != nil {
		t.Fatal(err)
	}
	mapping := "/dev/mapper/diskplane-" + v.id
	if _, err := os.Lstat(mapping); !os.IsNotExist(err) {
		t.Fatalf("stage opened the volume (%v): it has no token", err)
	}
	// publishWith publishes at target with tokens in the request's secrets
	// and in its volume context ("": none): the kubelet fills one, as the
	// CSIDriver says, and someone else may have put the other there.
	publishWith := func(target, inSecrets, inContext string) error {
		req := &csi.NodePublishVolumeRequest{VolumeId: v.id, StagingTargetPath: staging, TargetPath: target,
			VolumeCapability: mountCap, PublishContext: v.publish, VolumeContext: maps.Clone(vc)}
		if inSecrets != "" {
			req.Secrets = map[string]string{volumecontext.ServiceAccountTokensKey: inSecrets}
		}
		if inContext != "" {
			req.VolumeContext[volumecontext.ServiceAccountTokensKey] = inContext
		}
		_, err := r.node.NodePublishVolume(ctx(t), req)
		return err
	}
	publish := func(target, tokens string, inSecrets bool) error {
		if inSecrets {
			return publishWith(target, tokens, "")
		}
		return publishWith(target, "", tokens)
	}
	// afterTheNodeFollows retries a publish while the node plugin has not
	// seen the CSIDriver's latest setting (its watch follows within moments).
	afterTheNodeFollows := func(publish func() error) error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := publish()
			behind := status.Code(err) == codes.Unavailable ||
				status.Code(err) == codes.InvalidArgument && strings.Contains(err.Error(), "the kubelet passed none in the request's")
			if !behind || time.Now().After(deadline) {
				return err
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	dbTarget, webTarget := filepath.Join(r.dir, "pods", "db-0", "mount"), filepath.Join(r.dir, "pods", "web-0", "mount")

	c.setTokenPlace(true)
	dbToken := c.token("db")
	started := time.Now()
	if err := afterTheNodeFollows(func() error { return publish(dbTarget, dbToken, true) }); err != nil {
		t.Fatalf("the db pod's publish: %v", err)
	}
	t.Logf("first publish (STS, KMS, LUKS2 format and open, mkfs, mounts) took %s", time.Since(started))
	if got := mountedDevice(t, dbTarget); got == "" {
		t.Fatal("the db pod's target is not mounted")
	}
	if _, err := os.Lstat(mapping); err != nil {
		t.Fatalf("no mapping after the publish: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dbTarget, "orders"), []byte("only db may read this"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The kubelet republishes with the same token: nothing is asked of STS.
	before := stsCalls()
	started = time.Now()
	for range 20 {
		if err := publish(dbTarget, dbToken, true); err != nil {
			t.Fatalf("republish: %v", err)
		}
	}
	t.Logf("20 republishes with an authorised token took %s", time.Since(started))
	if after := stsCalls(); after != before {
		t.Fatalf("republishes with an authorised token made %v STS calls", after-before)
	}

	// A pod of another service account, on the same node as the open
	// volume, with the db pod's token planted in its volume context (where
	// the kubelet does not put tokens now): the node takes the web pod's
	// own token from the secrets, STS refuses its role, and it gets nothing.
	err = publishWith(webTarget, c.token("web"), c.token("db"))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "STS refused") {
		t.Fatalf("the web pod's publish with the db pod's token planted in its volume context: %v", err)
	}
	if got := mountedDevice(t, webTarget); got != "" {
		t.Fatalf("the web pod got the volume: %s", got)
	}

	// The key policy stops naming the role while the db pod runs: its next
	// token is refused by KMS, its mount and data stay.
	setKeyPolicy(false)
	metrics := os.Getenv("DISKPLANE_VM_NODE_METRICS")
	revokedBefore := sample(t, metrics, "diskplane_volume_unlock_refusals_total", "call", "republish", "refused_by", "kms")
	err = publish(dbTarget, c.token("db"), true)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "kms:Decrypt") {
		t.Fatalf("a republish after the revocation: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dbTarget, "orders")); err != nil || string(got) != "only db may read this" {
		t.Fatalf("the revocation took the pod's data away: %q, %v", got, err)
	}
	if n := sample(t, metrics, "diskplane_volume_unlock_refusals_total", "call", "republish", "refused_by", "kms") - revokedBefore; n != 1 {
		t.Fatalf("the node counted %v revoked republishes", n)
	}

	// Access restored, and the CSIDriver turned to the volume context (as
	// before Kubernetes 1.35): a new token there is authorised again, and
	// the db pod's token planted in the web pod's secrets is ignored.
	setKeyPolicy(true)
	c.setTokenPlace(false)
	if err := afterTheNodeFollows(func() error { return publish(dbTarget, c.token("db"), false) }); err != nil {
		t.Fatalf("after the access came back: %v", err)
	}
	err = publishWith(webTarget, c.token("db"), c.token("web"))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "STS refused") {
		t.Fatalf("the web pod's publish with the db pod's token planted in its secrets: %v", err)
	}
	if got := mountedDevice(t, webTarget); got != "" {
		t.Fatalf("the web pod got the volume: %s", got)
	}

	// The last unpublish closes the volume.
	if _, err := r.node.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: dbTarget}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(mapping); !os.IsNotExist(err) {
		t.Fatalf("the volume is still open after its last unpublish (%v)", err)
	}
	if _, err := r.node.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	r.detach(v)
}
