//go:build vm

package vm

import (
	"bufio"
	"context"
	"errors"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/driver/volumehealth"
	"github.com/diskplane/diskplane/pkg/emulator/admin"
)

const (
	account    = "123456789012"
	dbRole     = "arn:aws:iam::123456789012:role/shop-db"
	tenantRole = "arn:aws:iam::123456789012:role/tenant-db"
	ctrlRole   = "arn:aws:iam::123456789012:role/diskplane-controller"
	audience   = "sts.amazonaws.com"
	keyID      = "workload-volumes"
	tokenTTLSs = 600 // the API server's minimum
)

// keyPolicy lets the controller make keys, each tenant's role decrypt the
// keys bound to its own namespace (the shop-db role only when
// podMayDecrypt): both tenants share the one KMS key.
func keyPolicy(podMayDecrypt bool, namespace, tenant string) map[string]any {
	decrypt := func(role, ns string) map[string]any {
		return map[string]any{"Effect": "Allow", "Principal": map[string]any{"AWS": role}, "Action": "kms:Decrypt", "Resource": "*",
			"Condition": map[string]any{"StringEquals": map[string]any{"kms:EncryptionContext:diskplane:namespace": ns}}}
	}
	statements := []any{map[string]any{"Effect": "Allow", "Principal": map[string]any{"AWS": ctrlRole},
		"Action": []string{"kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncrypt*"}, "Resource": "*"}, decrypt(tenantRole, tenant)}
	if podMayDecrypt {
		statements = append(statements, decrypt(dbRole, namespace))
	}
	return map[string]any{"Version": "2012-10-17", "Statement": statements}
}

// trustedBy is an IAM role named name that the service account db of
// namespace may assume with its token from the cluster's issuer host.
func trustedBy(name, host, namespace string) map[string]any {
	return map[string]any{"name": name, "trustPolicy": map[string]any{"Statement": []any{map[string]any{
		"Effect": "Allow", "Principal": map[string]any{"Federated": "arn:aws:iam::" + account + ":oidc-provider/" + host},
		"Action": "sts:AssumeRoleWithWebIdentity",
		"Condition": map[string]any{"StringEquals": map[string]any{
			host + ":sub": "system:serviceaccount:" + namespace + ":db", host + ":aud": audience}},
	}}}}
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
// closes the volume. Two tenants share the KMS key: the other namespace's
// pod is refused the first one's key. The revoked pod's volume is fenced
// read-only (nodeEncryptionOnRevocation), its condition abnormal, and an
// event on the pod says so. The node takes tokens only from where the
// plugin's CSIDriver says the kubelet puts them, following it as it
// changes: the db pod's token planted in the web pod's other field unlocks
// nothing.
func TestWorkloadIdentity(t *testing.T) {
	r := newRig(t)
	c := newCluster(t)
	adminURL := os.Getenv("DISKPLANE_VM_ADMIN")
	emu := &admin.Client{URL: adminURL}
	setKeyPolicy := func(podMayDecrypt bool) {
		t.Helper()
		if err := emu.SetKMSKey(t.Context(), keyID, map[string]any{"policy": keyPolicy(podMayDecrypt, c.namespace, c.tenant)}); err != nil {
			t.Fatal(err)
		}
	}
	issuer, jwks := c.issuer()
	host := strings.TrimPrefix(issuer, "https://")
	if err := emu.SetIAM(t.Context(), map[string]any{
		"oidcProviders": []any{map[string]any{"url": issuer, "clientIds": []string{audience}, "jwks": jwks}},
		"roles":         []any{trustedBy("shop-db", host, c.namespace), trustedBy("tenant-db", host, c.tenant)},
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
			"nodeEncryptionKmsKeyId": keyID, "nodeEncryptionRoleArn": dbRole, "nodeEncryptionOnRevocation": "read-only",
			"csi.storage.k8s.io/pvc/namespace": c.namespace, "csi.storage.k8s.io/pvc/name": "data"},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: r.zone}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	v := &volume{name: "identity", id: resp.GetVolume().GetVolumeId()}
	vc := resp.GetVolume().GetVolumeContext()
	if vc[volumecontext.NodeEncryptionKeyNamespaceKey] != c.namespace {
		t.Fatalf("the volume's key is bound to namespace %q, not the claim's %s", vc[volumecontext.NodeEncryptionKeyNamespaceKey], c.namespace)
	}
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

	// The other tenant, sharing the KMS key: its db pod, with its own
	// valid token and its own role (a PersistentVolume naming the volume
	// with that role, which only an administrator could write), is refused
	// by KMS, since the key is bound to the first tenant's namespace; and
	// a volume context that claims its namespace does not decrypt at all.
	tenantTarget := filepath.Join(r.dir, "pods", "tenant-db-0", "mount")
	asTenant := func(namespace string) error {
		req := &csi.NodePublishVolumeRequest{VolumeId: v.id, StagingTargetPath: staging, TargetPath: tenantTarget,
			VolumeCapability: mountCap, PublishContext: v.publish, VolumeContext: maps.Clone(vc),
			Secrets: map[string]string{volumecontext.ServiceAccountTokensKey: c.tokenIn(c.tenant, "db")}}
		req.VolumeContext[volumecontext.NodeEncryptionRoleARNKey] = tenantRole
		req.VolumeContext[volumecontext.NodeEncryptionKeyNamespaceKey] = namespace
		_, err := r.node.NodePublishVolume(ctx(t), req)
		return err
	}
	if err := asTenant(c.namespace); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "KMS refused role "+tenantRole) {
		t.Fatalf("the other tenant's pod, its own role: %v", err)
	}
	if err := asTenant(c.tenant); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is not this volume's") {
		t.Fatalf("the other tenant's pod, claiming its namespace: %v", err)
	}
	if got := mountedDevice(t, tenantTarget); got != "" {
		t.Fatalf("the other tenant got the volume: %s", got)
	}

	// The key policy stops naming the role while the db pod runs: its next
	// token is refused by KMS; the class fences on revocation, so its data
	// stays readable and no longer writable, the volume's condition and an
	// event on the pod say why.
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
	if err := os.WriteFile(filepath.Join(dbTarget, "after-revocation"), nil, 0o600); !errors.Is(err, unix.EROFS) {
		t.Fatalf("a write after the revocation: %v, want EROFS (nodeEncryptionOnRevocation: read-only)", err)
	}
	stats, err := r.node.NodeGetVolumeStats(ctx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: v.id, VolumePath: dbTarget})
	if abnormal, msg, _ := volumehealth.Condition(stats); err != nil || !abnormal || !strings.Contains(msg, "access to the volume's key was revoked") {
		t.Fatalf("the volume's condition after the revocation: %t %q, %v", abnormal, msg, err)
	}
	c.waitForEvent("db-0", "KeyAccessRevoked", "read-only")

	// Access restored, and the CSIDriver turned to the volume context (as
	// before Kubernetes 1.35): a new token there is authorised again, and
	// the db pod's token planted in the web pod's secrets is ignored.
	setKeyPolicy(true)
	c.setTokenPlace(false)
	if err := afterTheNodeFollows(func() error { return publish(dbTarget, c.token("db"), false) }); err != nil {
		t.Fatalf("after the access came back: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dbTarget, "after-access-came-back"), nil, 0o600); err != nil {
		t.Fatalf("a write after the access came back: %v", err)
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
