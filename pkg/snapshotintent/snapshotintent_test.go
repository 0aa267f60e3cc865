package snapshotintent

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

const driver = "ebs.csi.diskplane.io"

var key = driver + "/" + AnnotationName

// content is a VolumeSnapshotContent with the given annotations.
func content(name string, annotations map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("snapshot.storage.k8s.io/v1")
	u.SetKind("VolumeSnapshotContent")
	u.SetName(name)
	u.SetResourceVersion("7")
	u.SetAnnotations(annotations)
	return u
}

func fakeClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{Contents: "VolumeSnapshotContentList"}, objs...)
}

func TestRecord(t *testing.T) {
	other := map[string]string{key: "controller-0-abcdef", "snapshot.storage.kubernetes.io/volumesnapshot-being-created": "yes"}
	for _, tc := range []struct {
		name     string
		existing map[string]string
		// conflicts is how many patches the API server refuses as
		// conflicting first.
		conflicts  int
		wantOthers bool
		wantErr    string
	}{
		{name: "first process", existing: map[string]string{"snapshot.storage.kubernetes.io/volumesnapshot-being-created": "yes"}},
		{name: "no annotations at all", existing: nil},
		{name: "another process before", existing: other, wantOthers: true},
		{name: "a changed content is read again", existing: other, conflicts: 2, wantOthers: true},
		{name: "conflicts without end", existing: nil, conflicts: conflictAttempts, wantErr: "has been modified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fakeClient(content("snapcontent-1", tc.existing))
			patches := 0
			client.PrependReactor("patch", "volumesnapshotcontents", func(k8stesting.Action) (bool, runtime.Object, error) {
				patches++
				if patches <= tc.conflicts {
					return true, nil, apierrors.NewConflict(Contents.GroupResource(), "snapcontent-1", errors.New("the object has been modified"))
				}
				return false, nil, nil
			})
			l, err := New(client, driver)
			if err != nil {
				t.Fatal(err)
			}
			others, err := l.For("snapcontent-1").Record(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Record: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Record: %v", err)
			}
			if others != tc.wantOthers {
				t.Errorf("others before = %v, want %v", others, tc.wantOthers)
			}
			got, err := client.Resource(Contents).Get(context.Background(), "snapcontent-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ann := got.GetAnnotations()
			if ann[key] != l.process {
				t.Errorf("annotation %s = %q, want this process %q", key, ann[key], l.process)
			}
			for k, v := range tc.existing {
				if k != key && ann[k] != v {
					t.Errorf("annotation %s = %q, was %q: the record must leave the others alone", k, ann[k], v)
				}
			}

			// Asked again (the snapshotter retries until the snapshot is
			// ready): nothing is written, no other process is reported.
			before := len(client.Actions())
			if others, err := l.For("snapcontent-1").Record(context.Background()); err != nil || others {
				t.Fatalf("recorded again: %v, %v; want no other process and no error", others, err)
			}
			for _, a := range client.Actions()[before:] {
				if a.GetVerb() != "get" {
					t.Errorf("recording again did %s, want only a read", a.GetVerb())
				}
			}

			// A successor process sees this one.
			next, err := New(client, driver)
			if err != nil {
				t.Fatal(err)
			}
			if next.process == l.process {
				t.Fatalf("two processes are both %q", l.process)
			}
			if others, err := next.For("snapcontent-1").Record(context.Background()); err != nil || !others {
				t.Fatalf("a successor recorded: %v, %v; want this process reported", others, err)
			}
		})
	}
}

// TestRecordMissingContent: a content that does not exist is an error, so
// nothing is sent.
func TestRecordMissingContent(t *testing.T) {
	l, err := New(fakeClient(), driver)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.For("snapcontent-gone").Record(context.Background())
	if !apierrors.IsNotFound(err) {
		t.Fatalf("Record: %v, want NotFound", err)
	}
}
