package tokenplace

import (
	"context"
	"errors"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

const driverName = "ebs.csi.diskplane.io"

func csiDriver(name string, inSecrets *bool) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSIDriverSpec{ServiceAccountTokenInSecrets: inSecrets}}
}

func TestWatch(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name    string
		objects []*storagev1.CSIDriver
		want    bool
		wantErr bool
	}{
		{name: "serviceAccountTokenInSecrets set", objects: []*storagev1.CSIDriver{csiDriver(driverName, &yes)}, want: true},
		{name: "serviceAccountTokenInSecrets false", objects: []*storagev1.CSIDriver{csiDriver(driverName, &no)}},
		{name: "serviceAccountTokenInSecrets unset", objects: []*storagev1.CSIDriver{csiDriver(driverName, nil)}},
		{name: "another driver's setting is not ours", objects: []*storagev1.CSIDriver{csiDriver("other.csi.example.com", &yes)}, wantErr: true},
		{name: "no CSIDriver", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			for _, d := range tc.objects {
				if _, err := client.StorageV1().CSIDrivers().Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			w := NewWatch(client, driverName)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go w.Run(ctx)
			got, err := w.TokensInSecrets(ctx)
			if tc.wantErr {
				if !errors.Is(err, ErrUnknown) {
					t.Fatalf("TokensInSecrets = %t, %v; want ErrUnknown", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("TokensInSecrets = %t, %v; want %t", got, err, tc.want)
			}
		})
	}
}

// TestWatchFollowsChanges: the answer follows the object as the kubelet's
// does, without a restart.
func TestWatchFollowsChanges(t *testing.T) {
	client := fake.NewClientset()
	w := NewWatch(client, driverName)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go w.Run(ctx)
	drivers := client.StorageV1().CSIDrivers()
	yes := true
	d, err := drivers.Create(ctx, csiDriver(driverName, &yes), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, want bool, wantErr bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := w.TokensInSecrets(ctx)
			if (err != nil) == wantErr && (wantErr || got == want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: TokensInSecrets = %t, %v", what, got, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("created", true, false)
	d.Spec.ServiceAccountTokenInSecrets = nil
	if _, err := drivers.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("turned off", false, false)
	if err := drivers.Delete(ctx, driverName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("deleted", false, true)
}

// TestWatchNotRead: before the first list, the answer waits within the
// caller's deadline and then says the place is not known.
func TestWatchNotRead(t *testing.T) {
	w := NewWatch(fake.NewClientset(), driverName) // never Run
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := w.TokensInSecrets(ctx); !errors.Is(err, ErrUnknown) {
		t.Fatalf("TokensInSecrets before the watch ran: %v", err)
	}
}

func TestFixed(t *testing.T) {
	for _, want := range []bool{false, true} {
		if got, err := Fixed(want).TokensInSecrets(t.Context()); err != nil || got != want {
			t.Errorf("Fixed(%t) = %t, %v", want, got, err)
		}
	}
}
