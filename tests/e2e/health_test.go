//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/diskplane/diskplane/pkg/driver/volumehealth"
	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// healthTimeout bounds the wait for the kubelet's report of a volume's
// condition: its volume stats period (15 s in the local cluster), jittered,
// plus the time ext4 takes to notice its failing journal.
const healthTimeout = 3 * time.Minute

// TestVolumeHealth runs examples/dynamic-provisioning and breaks its
// volume twice, the two ways Diskplane can tell:
//   - EC2 reports it impaired with its I/O disabled (the emulator's admin
//     API): the controller's ControllerGetVolume, asked through its CSI
//     socket as external-health-monitor asks it, answers an abnormal
//     condition that says what to do;
//   - its device fails every write (the emulator's admin API): the pod's
//     writes fail, ext4 records the errors, and the kubelet (CSIVolumeHealth
//     on) reports the node plugin's abnormal condition as a
//     VolumeConditionAbnormal event on the pod.
func TestVolumeHealth(t *testing.T) {
	t.Parallel()
	sc := newScenario(t)
	sc.create(sc.example("dynamic-provisioning")...)
	pod := sc.podReady("app")
	_, pv := sc.claimBound("diskplane-claim")
	id := pv.Spec.CSI.VolumeHandle
	// Heal before the scenario's cleanup deletes the pod and the claim.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, err := range []error{env.emulator.failIO(ctx, id, false), env.emulator.setHealth(ctx, id, "{}")} {
			if err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})

	if abnormal, msg := controllerCondition(t, id); abnormal {
		t.Fatalf("a new volume's condition is abnormal: %q", msg)
	}
	impaired := fmt.Sprintf(`{"status":"impaired","ioEnabled":"failed","events":[{"id":"evol-e2e","type":"potential-data-inconsistency",
		"description":"Awaiting Action: Enable IO","notBefore":%q}],"actions":[{"code":"enable-volume-io","eventId":"evol-e2e"}]}`,
		time.Now().UTC().Format(time.RFC3339))
	if err := env.emulator.setHealth(t.Context(), id, impaired); err != nil {
		t.Fatal(err)
	}
	abnormal, msg := controllerCondition(t, id)
	if !abnormal || !strings.Contains(msg, "aws ec2 enable-volume-io --volume-id "+id) {
		t.Errorf("ControllerGetVolume of an impaired volume: abnormal %v, %q", abnormal, msg)
	}
	t.Logf("the controller's condition of the impaired volume: %s", msg)

	if err := env.emulator.failIO(t.Context(), id, true); err != nil {
		t.Fatal(err)
	}
	sc.waitFor("the kubelet's VolumeConditionAbnormal event on the pod", healthTimeout, func(ctx context.Context) (bool, string, error) {
		sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod.Name, "reason": "VolumeConditionAbnormal"}.AsSelector().String()
		events, err := env.client.CoreV1().Events(sc.ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			// A busy API server's refusal is not the test's answer.
			return false, "listing the events: " + err.Error(), nil
		}
		if len(events.Items) == 0 {
			return false, "no such event yet", nil
		}
		// The kernel flushes ext4's error count to its super block a moment
		// after it fails the writes: an event from before may name only the
		// shut-down filesystem, and a later one adds what it recorded.
		var seen []string
		for _, e := range events.Items {
			if strings.Contains(e.Message, "recorded") && strings.Contains(e.Message, "e2fsck") {
				t.Logf("event on pod %s: %s", pod.Name, e.Message)
				return true, "", nil
			}
			seen = append(seen, e.Message)
		}
		return false, fmt.Sprintf("no event names the filesystem's recorded errors and what to do yet; the events say %q", seen), nil
	})
}

// controllerCondition asks the plugin that serves the Controller service
// for the volume (ControllerGetVolume) and returns its volume condition. A
// plugin that cannot answer for now (a controller container restarting on
// a loaded machine, its socket not there yet) is asked again for a minute.
func controllerCondition(t *testing.T, volumeID string) (abnormal bool, message string) {
	t.Helper()
	var resp *csi.ControllerGetVolumeResponse
	err := poll.Until(t.Context(), time.Minute, func(ctx context.Context) (bool, string, error) {
		var err error
		resp, err = controllerGetVolume(ctx, volumeID)
		if status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded {
			return false, err.Error(), nil
		}
		return err == nil, "", err
	})
	if err != nil {
		t.Fatalf("ControllerGetVolume(%s): %v", volumeID, err)
	}
	abnormal, message, ok := volumehealth.Condition(resp.GetStatus())
	if !ok {
		t.Fatalf("ControllerGetVolume(%s) carries no volume condition", volumeID)
	}
	return abnormal, message
}

// controllerGetVolume asks a Ready controller pod's plugin through its
// socket, as external-health-monitor does.
func controllerGetVolume(ctx context.Context, volumeID string) (*csi.ControllerGetVolumeResponse, error) {
	socket, err := env.driver.controllerSocket(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	// A pod's socket path is longer than a unix socket address may be:
	// dial it through a short link.
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	link := filepath.Join(dir, "csi.sock")
	if err := os.Symlink(socket, link); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+link, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := csi.NewControllerClient(conn).ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: volumeID})
	if err != nil {
		return nil, fmt.Errorf("on %s: %w", socket, err)
	}
	return resp, nil
}
