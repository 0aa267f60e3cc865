//go:build linux && wine

package windows

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/pkg/filetree"
	"github.com/diskplane/diskplane/pkg/kubeclient"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// fakeAPIServer answers the two questions the preStop hook asks: the Node,
// and the VolumeAttachments. It checks the hook's service account token.
type fakeAPIServer struct {
	*httptest.Server
	cordoned bool
	// attached is whether the node still has a volume of the driver.
	attached atomic.Bool
}

const preStopToken = "hook-token"

func newFakeAPIServer(t *testing.T, cordoned bool) *fakeAPIServer {
	t.Helper()
	s := &fakeAPIServer{cordoned: cordoned}
	s.attached.Store(true)
	reply := func(w http.ResponseWriter, r *http.Request, obj any) {
		if r.Header.Get("Authorization") != "Bearer "+preStopToken {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(obj)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, r, &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{Name: r.PathValue("name")}, Spec: corev1.NodeSpec{Unschedulable: s.cordoned}})
	})
	mux.HandleFunc("GET /apis/storage.k8s.io/v1/volumeattachments", func(w http.ResponseWriter, r *http.Request) {
		pv := "pvc-1"
		list := &storagev1.VolumeAttachmentList{TypeMeta: metav1.TypeMeta{APIVersion: "storage.k8s.io/v1", Kind: "VolumeAttachmentList"},
			Items: []storagev1.VolumeAttachment{{ObjectMeta: metav1.ObjectMeta{Name: "csi-other"},
				Spec: storagev1.VolumeAttachmentSpec{Attacher: "smb.csi.k8s.io", NodeName: "win-1"}}}}
		if s.attached.Load() {
			list.Items = append(list.Items, storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "csi-1"},
				Spec: storagev1.VolumeAttachmentSpec{Attacher: driverName, NodeName: "win-1",
					Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}}})
		}
		reply(w, r, list)
	})
	s.Server = httptest.NewTLSServer(mux)
	t.Cleanup(s.Close)
	return s
}

// TestPreStopWaitsForDetach runs the Windows DaemonSet's preStop hook,
// diskplane.exe pre-stop, under Wine against an API server: on a cordoned
// node it waits until the node's last VolumeAttachment of the driver is
// gone; on a node that stays it returns at once. The service account is
// where a HostProcess container on containerd 1.6 has it (below
// CONTAINER_SANDBOX_MOUNT_POINT). Where an ordinary Windows container has
// it (C:\var\run\secrets\…, read as /var/run/… on the current drive) Wine
// cannot show: it reads a path that starts with a slash as a path of the
// Linux machine.
func TestPreStopWaitsForDetach(t *testing.T) {
	testutil.RequireWine(t, winePrefix)
	const sandbox = `C:\diskplane-sandbox`
	for _, tc := range []struct {
		name     string
		cordoned bool
	}{
		{name: "cordoned", cordoned: true},
		{name: "node stays"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPIServer(t, tc.cordoned)
			writeServiceAccount(t, localPath(sandbox), api.Server)
			host, port, err := net.SplitHostPort(strings.TrimPrefix(api.URL, "https://"))
			if err != nil {
				t.Fatal(err)
			}
			const detachAfter = 2 * time.Second
			time.AfterFunc(detachAfter, func() { api.attached.Store(false) })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, wineRun, filepath.Join(exeDir, "diskplane.exe"), "pre-stop",
				"--driver-name="+driverName, "--poll-interval=200ms", "--v=2")
			cmd.Env = append(os.Environ(), "WINEPREFIX="+winePrefix, "CSI_NODE_NAME=win-1", kubeclient.SandboxEnv+"="+sandbox,
				"KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err = cmd.Run()
			took := time.Since(start)
			if err != nil {
				t.Fatalf("pre-stop: %v\n%s", err, out.String())
			}
			switch {
			case tc.cordoned && (took < detachAfter || !strings.Contains(out.String(), "No volume of the driver is attached")):
				t.Fatalf("pre-stop on a cordoned node returned after %s, want after the detach (%s):\n%s", took, detachAfter, out.String())
			case !tc.cordoned && !strings.Contains(out.String(), "The node is not going away"):
				t.Fatalf("pre-stop on a node that stays:\n%s", out.String())
			}
			t.Logf("pre-stop returned after %.1f s", took.Seconds())
		})
	}
}

// writeServiceAccount writes a service account token and the API server's
// CA below root (a sandbox, removed afterwards), where the kubelet mounts
// them.
func writeServiceAccount(t *testing.T, root string, api *httptest.Server) {
	t.Helper()
	dir := filepath.Join(root, "var", "run", "secrets", "kubernetes.io", "serviceaccount")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := filetree.Remove(root); err != nil {
			t.Errorf("remove the service account: %v", err)
		}
	})
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})
	for name, data := range map[string][]byte{"token": []byte(preStopToken), "ca.crt": ca} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
