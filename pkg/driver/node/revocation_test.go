package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/driver/volumehealth"
	"github.com/diskplane/diskplane/pkg/podevents"
)

// TestRevocationShowsInTheVolumeCondition: a republish refused while the
// pod keeps its mount makes the volume's condition abnormal at that target
// (NodeGetVolumeStats, NodeGetVolumeHealth), naming who refused; another
// target of the volume stays healthy, and an authorised token clears it.
func TestRevocationShowsInTheVolumeCondition(t *testing.T) {
	f := &healthOS{fakeOS: newFakeOS()}
	f.addVolume(volID, volDev, gib)
	u := &fakeUnwrapper{refuse: map[string]error{}}
	place := &testPlace{inSecrets: true}
	s, err := New(Config{Metadata: staticMetadata(testInstance()), Mounter: f, ReservedVolumeAttachments: -1, Unwrapper: u,
		TokenPlace: place, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	r := &workloadRig{s: s, f: f.fakeOS, kms: u, place: place}
	r.stage(t)
	token := podToken("shop", "db-0", "db")
	for _, path := range []string{target, target2} {
		if err := r.publish(path, token, true); err != nil {
			t.Fatal(err)
		}
	}
	f.stats[fakeMapping(volID)] = fsStats
	condition := func(path string) (abnormal bool, message string) {
		t.Helper()
		out, err := s.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: volID, VolumePath: path})
		if err != nil {
			t.Fatal(err)
		}
		abnormal, message, _ = volumehealth.Condition(out)
		return abnormal, message
	}
	if abnormal, msg := condition(target); abnormal {
		t.Fatalf("before any refusal: %s", msg)
	}
	revoked := podToken("shop", "db-0", "db") + "x"
	u.refuse[revoked] = fmt.Errorf("KMS Decrypt: %w: AccessDeniedException", datakeys.ErrAccessDenied)
	wantCode(t, r.publish(target, revoked, true), codes.PermissionDenied)
	if abnormal, msg := condition(target); !abnormal || !strings.Contains(msg, "access to the volume's key was revoked (volume "+volID+": KMS refused role") {
		t.Fatalf("after a revoked republish: %t %q", abnormal, msg)
	}
	if abnormal, msg := condition(target2); abnormal {
		t.Fatalf("the volume's other publication: %s", msg)
	}
	h, err := s.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: volID, VolumePublishPath: target})
	if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) != 1 || h.GetVolumeHealth().GetHealthStatuses()[0].GetReason() != "KeyAccessRevoked" {
		t.Fatalf("NodeGetVolumeHealth = %v, %v", h, err)
	}
	if err := r.publish(target, revoked+"y", true); err != nil {
		t.Fatal(err)
	}
	if abnormal, msg := condition(target); abnormal {
		t.Fatalf("after access came back: %s", msg)
	}
}

// podEvents records the warnings the node gives pods.
type podEvents struct {
	mu     sync.Mutex
	warned []string // "<namespace>/<name> <reason>: <message>"
}

func (e *podEvents) Warn(pod podevents.Pod, reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.warned = append(e.warned, pod.Namespace+"/"+pod.Name+" "+reason+": "+message)
}

func (e *podEvents) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.warned)
}

// newRevocationRig is a workload rig whose volume context fences on
// revocation when fence, and whose pod events are recorded.
func newRevocationRig(t *testing.T, fence bool) (*workloadRig, *podEvents) {
	t.Helper()
	f := newFakeOS()
	f.addVolume(volID, volDev, gib)
	u := &fakeUnwrapper{refuse: map[string]error{}}
	place, events := &testPlace{inSecrets: true}, &podEvents{}
	s, err := New(Config{Metadata: staticMetadata(testInstance()), Mounter: f, ReservedVolumeAttachments: -1, Unwrapper: u,
		TokenPlace: place, Events: events, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	r := &workloadRig{s: s, f: f, kms: u, place: place, fence: fence}
	r.stage(t)
	return r, events
}

// readOnly reports whether writes through the fake's mount at path fail.
func (r *workloadRig) readOnly(t *testing.T, path string) bool {
	t.Helper()
	if mounted, err := r.f.IsMountPoint(path); err != nil || !mounted {
		t.Fatalf("nothing is mounted at %s (%v)", path, err)
	}
	return r.f.filesystemReadOnly(path)
}

// TestRevocationFencesTheVolume: with nodeEncryptionOnRevocation:
// read-only, a revoked republish remounts the volume's filesystem
// read-only for every pod on the node, says so on the pod (the answer, the
// event, the condition), and a later authorised token of the revoked
// publication, or its unpublish, makes it writable again once no
// publication is revoked; without it nothing is remounted, and the pod is
// still warned.
func TestRevocationFencesTheVolume(t *testing.T) {
	accessDenied := fmt.Errorf("KMS Decrypt: %w: AccessDeniedException", datakeys.ErrAccessDenied)
	t.Run("fenced, then authorised again", func(t *testing.T) {
		r, events := newRevocationRig(t, true)
		token := podToken("shop", "db-0", "db")
		for _, path := range []string{target, target2} {
			if err := r.publish(path, token, true); err != nil {
				t.Fatal(err)
			}
		}
		revoked, revoked2 := token+"x", token+"y"
		r.kms.refuse[revoked], r.kms.refuse[revoked2] = accessDenied, accessDenied
		err := r.publish(target, revoked, true)
		wantCode(t, err, codes.PermissionDenied)
		if !strings.Contains(err.Error(), "the volume's filesystem on this node is read-only (nodeEncryptionOnRevocation: read-only)") {
			t.Fatalf("the revoked pod's answer does not say it is fenced: %v", err)
		}
		if !r.readOnly(t, target) || !r.readOnly(t, target2) || !r.readOnly(t, staging) {
			t.Fatal("a fenced volume's mounts are writable")
		}
		if got := r.f.recorded("mount -o remount"); !slices.Equal(got, []string{"mount -o remount,ro " + staging}) {
			t.Fatalf("remounts %q", got)
		}
		if got := events.all(); len(got) != 1 || !strings.HasPrefix(got[0], "shop/db-0 KeyAccessRevoked: Diskplane: access to the key of volume "+volID+" was revoked: volume "+volID+": KMS refused role") {
			t.Fatalf("events %q", got)
		}
		// The kubelet's next republishes within the recheck: the same
		// answer, no second event.
		wantCode(t, r.publish(target, revoked, true), codes.PermissionDenied)
		if n := len(events.all()); n != 1 {
			t.Fatalf("%d events for one refused token", n)
		}
		// Both publications revoked; one gets access back: still fenced.
		wantCode(t, r.publish(target2, revoked2, true), codes.PermissionDenied)
		if err := r.publish(target, revoked+"-renewed", true); err != nil {
			t.Fatal(err)
		}
		if !r.readOnly(t, target) {
			t.Fatal("unfenced while another publication is still revoked")
		}
		// The other revoked pod goes: writable again.
		if _, err := r.s.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target2}); err != nil {
			t.Fatal(err)
		}
		if r.readOnly(t, target) || r.readOnly(t, staging) {
			t.Fatal("still read-only after the last revoked publication went")
		}
		if got := r.f.recorded("mount -o remount"); !slices.Equal(got, []string{"mount -o remount,ro " + staging, "mount -o remount,rw " + staging}) {
			t.Fatalf("remounts %q", got)
		}
	})
	t.Run("fenced, then the same publication authorised", func(t *testing.T) {
		r, _ := newRevocationRig(t, true)
		token := podToken("shop", "db-0", "db")
		if err := r.publish(target, token, true); err != nil {
			t.Fatal(err)
		}
		r.kms.refuse[token+"x"] = accessDenied
		wantCode(t, r.publish(target, token+"x", true), codes.PermissionDenied)
		if err := r.publish(target, token+"z", true); err != nil {
			t.Fatal(err)
		}
		if r.readOnly(t, target) {
			t.Fatal("still read-only after the pod's access came back")
		}
	})
	t.Run("kept", func(t *testing.T) {
		r, events := newRevocationRig(t, false)
		token := podToken("shop", "db-0", "db")
		if err := r.publish(target, token, true); err != nil {
			t.Fatal(err)
		}
		r.kms.refuse[token+"x"] = accessDenied
		err := r.publish(target, token+"x", true)
		wantCode(t, err, codes.PermissionDenied)
		if !strings.Contains(err.Error(), "the pod keeps its mount until it stops") || r.readOnly(t, target) {
			t.Fatalf("a kept volume: %v, read-only %t", err, r.readOnly(t, target))
		}
		if got := r.f.recorded("mount -o remount"); len(got) != 0 {
			t.Fatalf("remounts %q", got)
		}
		if got := events.all(); len(got) != 1 || !strings.Contains(got[0], "KeyAccessRevoked") {
			t.Fatalf("events %q", got)
		}
	})
	t.Run("a refused first publish is no revocation", func(t *testing.T) {
		r, events := newRevocationRig(t, true)
		token := podToken("shop", "web-0", "web")
		r.kms.refuse[token] = accessDenied
		wantCode(t, r.publish(target, token, true), codes.PermissionDenied)
		if got := r.f.recorded("mount -o remount"); len(got) != 0 || len(events.all()) != 0 {
			t.Fatalf("remounts %q, events %q", got, events.all())
		}
	})
	t.Run("fencing fails", func(t *testing.T) {
		r, _ := newRevocationRig(t, true)
		token := podToken("shop", "db-0", "db")
		if err := r.publish(target, token, true); err != nil {
			t.Fatal(err)
		}
		r.f.failOn["RemountFilesystem"] = fmt.Errorf("mount: permission denied")
		r.kms.refuse[token+"x"] = accessDenied
		err := r.publish(target, token+"x", true)
		wantCode(t, err, codes.PermissionDenied)
		if !strings.Contains(err.Error(), "fencing the volume read-only failed (mount: permission denied): it is still writable") {
			t.Fatalf("a failed fence: %v", err)
		}
	})
}
