package guestagent

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// fakeExposer keeps exposed volumes in memory; busy volumes refuse a detach
// without force.
type fakeExposer struct {
	mu     sync.Mutex
	disks  map[string]Disk
	busy   map[string]bool
	images map[string]string
	next   int
	calls  []string
	fail   error
}

func newFakeExposer() *fakeExposer {
	return &fakeExposer{disks: map[string]Disk{}, busy: map[string]bool{}, images: map[string]string{}}
}

func (f *fakeExposer) Attach(volumeID, image string) (Disk, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "attach "+volumeID+" "+image)
	if f.fail != nil {
		return Disk{}, f.fail
	}
	if d, ok := f.disks[volumeID]; ok {
		return d, nil
	}
	d := Disk{VolumeID: volumeID, Device: fmt.Sprintf("/dev/nvme%dn1", f.next)}
	f.next++
	f.disks[volumeID], f.images[volumeID] = d, image
	return d, nil
}

func (f *fakeExposer) Detach(volumeID string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("detach %s force=%v", volumeID, force))
	if f.busy[volumeID] && !force {
		return fmt.Errorf("%w: mounted at /mnt", ErrBusy)
	}
	delete(f.disks, volumeID)
	delete(f.busy, volumeID)
	return nil
}

func (f *fakeExposer) Resize(volumeID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "resize "+volumeID)
	if _, ok := f.disks[volumeID]; !ok {
		return ErrNotAttached
	}
	return nil
}

func (f *fakeExposer) List() ([]Disk, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Disk
	for _, d := range f.disks {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Disk) int { return strings.Compare(a.VolumeID, b.VolumeID) })
	return out, nil
}

const (
	volA = "vol-0123456789abcdef0"
	volB = "vol-0aaaaaaaaaaaaaaaa"
)

// TestClientAgainstHandler drives a fake guest through the real HTTP
// transport: what the emulator's store sees is what the guest did, and the
// guest's errors come back as the same sentinels.
func TestClientAgainstHandler(t *testing.T) {
	fake := newFakeExposer()
	srv := httptest.NewServer(Handler(fake))
	defer srv.Close()
	c, err := NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Attach(volA, "/host/data/volumes/"+volA+".img")
	if err != nil || d != (Disk{VolumeID: volA, Device: "/dev/nvme0n1"}) {
		t.Fatalf("Attach = %+v, %v", d, err)
	}
	if again, err := c.Attach(volA, "/host/data/volumes/"+volA+".img"); err != nil || again != d {
		t.Fatalf("repeated Attach = %+v, %v; want %+v", again, err, d)
	}
	if _, err := c.Attach(volB, "/host/data/volumes/"+volB+".img"); err != nil {
		t.Fatal(err)
	}
	list, err := c.List()
	if err != nil || len(list) != 2 || list[0].VolumeID != volA || list[1].Device != "/dev/nvme1n1" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if err := c.Resize(volA); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	fake.busy[volA] = true
	if err := c.Detach(volA, false); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "mounted at /mnt") {
		t.Fatalf("Detach of a busy volume = %v, want ErrBusy with the guest's reason", err)
	}
	if err := c.Detach(volA, true); err != nil {
		t.Fatalf("forced Detach: %v", err)
	}
	if err := c.Resize(volA); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("Resize after detach = %v, want ErrNotAttached", err)
	}
	if err := c.Detach(volA, false); err != nil {
		t.Fatalf("Detach of a detached volume: %v", err)
	}
	fake.fail = errors.New("configfs said no")
	if _, err := c.Attach(volA, "/img"); err == nil || !strings.Contains(err.Error(), "configfs said no") {
		t.Fatalf("Attach with a failing guest = %v", err)
	}
}

// TestHandlerRefusesBadInput checks that nothing reaches the guest's kernel
// from a malformed request.
func TestHandlerRefusesBadInput(t *testing.T) {
	tests := []struct {
		name, method, path, body string
		want                     int
	}{
		{"not a volume ID", http.MethodPut, "/v1/disks/vol-xyz", `{"image":"/img"}`, http.StatusBadRequest},
		{"path in the ID", http.MethodPut, "/v1/disks/..%2Fetc", `{"image":"/img"}`, http.StatusBadRequest},
		{"no image", http.MethodPut, "/v1/disks/" + volA, `{}`, http.StatusBadRequest},
		{"not JSON", http.MethodPut, "/v1/disks/" + volA, `image=/img`, http.StatusBadRequest},
		{"bad force", http.MethodDelete, "/v1/disks/" + volA + "?force=maybe", "", http.StatusBadRequest},
		{"bad ID on detach", http.MethodDelete, "/v1/disks/sda", "", http.StatusBadRequest},
		{"bad ID on resize", http.MethodPost, "/v1/disks/vol-1/resize", "", http.StatusBadRequest},
		{"unknown route", http.MethodGet, "/v1/other", "", http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFakeExposer()
			rec := httptest.NewRecorder()
			Handler(fake).ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.want, rec.Body)
			}
			if len(fake.calls) != 0 {
				t.Fatalf("the guest was called: %v", fake.calls)
			}
		})
	}
}

func TestNewClientRefusesBadAddresses(t *testing.T) {
	for _, addr := range []string{"", "127.0.0.1:8703", "ftp://x", "http://"} {
		if _, err := NewClient(addr); err == nil {
			t.Errorf("NewClient(%q) accepted", addr)
		}
	}
}

func TestValidateVolumeID(t *testing.T) {
	for id, ok := range map[string]bool{volA: true, "vol-12345678": true, "vol-123": false, "vol-0123456789ABCDEF0": false, "snap-12345678": false, "": false} {
		if err := ValidateVolumeID(id); (err == nil) != ok {
			t.Errorf("ValidateVolumeID(%q) = %v", id, err)
		}
	}
}
