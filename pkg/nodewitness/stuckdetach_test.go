package nodewitness

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/diskplane/diskplane/pkg/cloud"
)

const (
	instanceA = "i-0000000000000000a"
	volumeA   = "vol-0000000000000000a"
)

// detaching is a VolumeAttachment of the driver for pv-a on worker-1 that
// Kubernetes asked to detach ago (0: not asked).
func detaching(attacher string, ago time.Duration) *storagev1.VolumeAttachment {
	pv := "pv-a"
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-a", UID: types.UID("uid-a")},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: attacher, NodeName: "worker-1",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
	}
	if ago > 0 {
		when := metav1.NewTime(time.Now().Add(-ago))
		va.DeletionTimestamp = &when
		va.Finalizers = []string{"external-attacher/" + attacher}
	}
	return va
}

func pvA() *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: volumeA}}}}
}

func TestStuckDetaches(t *testing.T) {
	for _, tc := range []struct {
		name     string
		va       *storagev1.VolumeAttachment
		ready    corev1.ConditionStatus
		instance string // the instance's state
		ec2State string // the volume's attachment to it in EC2; "" none
		// want: the gauge's state label ("" no point), and the words of
		// the events on the PV and the Node ("" none).
		wantGauge, wantEvent string
	}{
		{name: "a hung node's detach stays detaching", va: detaching(driverName, 45*time.Second), ready: corev1.ConditionUnknown,
			instance: cloud.InstanceRunning, ec2State: cloud.AttachmentDetaching,
			wantGauge: cloud.AttachmentDetaching, wantEvent: "the Node is not Ready (its guest hangs or is cut off): stop the instance (aws ec2 stop-instances --instance-ids " + instanceA + ")"},
		{name: "busy on a Ready node", va: detaching(driverName, time.Minute), ready: corev1.ConditionTrue,
			instance: cloud.InstanceRunning, ec2State: cloud.AttachmentBusy,
			wantGauge: cloud.AttachmentBusy, wantEvent: "something on it still holds the device"},
		{name: "young detaches are not looked at", va: detaching(driverName, 5*time.Second), ready: corev1.ConditionUnknown,
			instance: cloud.InstanceRunning, ec2State: cloud.AttachmentDetaching},
		{name: "pending, not stuck yet: only measured", va: detaching(driverName, 20*time.Second), ready: corev1.ConditionUnknown,
			instance: cloud.InstanceRunning, ec2State: cloud.AttachmentDetaching, wantGauge: cloud.AttachmentDetaching},
		{name: "a stopping instance's detach finishes by itself", va: detaching(driverName, time.Minute), ready: corev1.ConditionTrue,
			instance: cloud.InstanceStopping, ec2State: cloud.AttachmentDetaching, wantGauge: cloud.AttachmentDetaching},
		{name: "not detached yet is not stuck in EC2", va: detaching(driverName, time.Minute), ready: corev1.ConditionUnknown,
			instance: cloud.InstanceRunning, ec2State: cloud.AttachmentAttached, wantGauge: cloud.AttachmentAttached},
		{name: "EC2 finished it", va: detaching(driverName, time.Minute), ready: corev1.ConditionUnknown,
			instance: cloud.InstanceRunning},
		{name: "no detach asked", va: detaching(driverName, 0), ready: corev1.ConditionUnknown,
			instance: cloud.InstanceRunning, ec2State: cloud.AttachmentAttached},
		{name: "another driver's", va: detaching("other.csi.example.com", time.Minute), ready: corev1.ConditionUnknown,
			instance: cloud.InstanceRunning, ec2State: cloud.AttachmentDetaching},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, node("worker-1", instanceA, tc.ready), pvA(), tc.va)
			f.ec2.set(instanceA, tc.instance)
			vol := &cloud.Volume{ID: volumeA}
			if tc.ec2State != "" {
				vol.Attachments = []cloud.Attachment{{InstanceID: "i-0000000000000000f", State: cloud.AttachmentAttached}, {InstanceID: instanceA, State: tc.ec2State}}
			}
			f.ec2.volumes[volumeA] = vol

			f.sync(t)
			if got := points(f.w.pending); (got == 1) != (tc.wantGauge != "") {
				t.Fatalf("pending-detach points = %d, want state %q", got, tc.wantGauge)
			}
			if tc.wantGauge != "" {
				if got := value(t, f.w.pending.WithLabelValues(volumeA, "worker-1", tc.wantGauge)); got < time.Since(tc.va.DeletionTimestamp.Time).Seconds()-1 {
					t.Fatalf("pending seconds = %v", got)
				}
			}
			var events []string
			for e := f.event(); e != ""; e = f.event() {
				events = append(events, e)
			}
			if tc.wantEvent == "" {
				if len(events) != 0 {
					t.Fatalf("events %q", events)
				}
				return
			}
			// One on the PersistentVolume, one on the Node.
			if len(events) != 2 {
				t.Fatalf("events %q, want two", events)
			}
			for _, e := range events {
				if !strings.HasPrefix(e, "Warning "+ReasonDetachStuck) || !strings.Contains(e, tc.wantEvent) || !strings.Contains(e, "never forces a detach") {
					t.Fatalf("event %q, want %q", e, tc.wantEvent)
				}
			}
			// Said once.
			f.sync(t)
			if e := f.event(); e != "" {
				t.Fatalf("a second look recorded %q", e)
			}
		})
	}
}

// points is how many points a metric vector has.
func points(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}

// TestPendingDetachesAreReadTogether: the volumes of many pending detaches
// are asked about at once, so that the cloud layer's batcher pages them into
// a few DescribeVolumes, and a young detach costs no read.
func TestPendingDetachesAreReadTogether(t *testing.T) {
	objects := []any{node("worker-1", instanceA, corev1.ConditionUnknown)}
	var vols []string
	for i := range 3 {
		va, pv := detaching(driverName, time.Minute), pvA()
		name := fmt.Sprintf("pv-%d", i)
		va.Name, va.UID, va.Spec.Source.PersistentVolumeName = "csi-"+name, types.UID("uid-"+name), &name
		pv.Name, pv.Spec.CSI.VolumeHandle = name, fmt.Sprintf("vol-000000000000000%d", i)
		vols = append(vols, pv.Spec.CSI.VolumeHandle)
		objects = append(objects, va, pv)
	}
	young := detaching(driverName, time.Second)
	young.Name, young.UID = "csi-young", "uid-young"
	objects = append(objects, young)
	f := newFixture(t, objects...)
	f.ec2.set(instanceA, cloud.InstanceRunning)
	for _, v := range vols {
		f.ec2.volumes[v] = &cloud.Volume{ID: v, Attachments: []cloud.Attachment{{InstanceID: instanceA, State: cloud.AttachmentBusy}}}
	}
	f.ec2.gather = len(vols)
	f.sync(t)
	if f.ec2.peak != len(vols) {
		t.Fatalf("at most %d of the %d pending detaches' volume reads were in flight at once", f.ec2.peak, len(vols))
	}
	if len(f.ec2.volumesAsked) != len(vols) || slices.Contains(f.ec2.volumesAsked, volumeA) {
		t.Fatalf("volumes asked for: %v (the young detach's %s must not be)", f.ec2.volumesAsked, volumeA)
	}
	if got := points(f.w.pending); got != len(vols) {
		t.Fatalf("pending-detach points = %d", got)
	}
	// Once for the NotReady Node, once for all three of its stuck detaches.
	if len(f.ec2.asked) != 2 {
		t.Fatalf("the one instance was asked about %d times in one look, want 2", len(f.ec2.asked))
	}
}
