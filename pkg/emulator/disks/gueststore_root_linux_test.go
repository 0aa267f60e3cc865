package disks

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/emulator/guestagent"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// recordingGuest is a guest agent that remembers what it exposes and every
// call it gets.
type recordingGuest struct {
	exposed map[string]string // volume ID -> image path in the guest
	busy    map[string]bool
	calls   []string
}

func (g *recordingGuest) Attach(volumeID, image string) (guestagent.Disk, error) {
	g.calls = append(g.calls, "attach "+volumeID)
	g.exposed[volumeID] = image
	return guestagent.Disk{VolumeID: volumeID, Device: "/dev/nvme-" + volumeID}, nil
}

func (g *recordingGuest) Detach(volumeID string, force bool) error {
	g.calls = append(g.calls, fmt.Sprintf("detach %s force=%v", volumeID, force))
	if g.busy[volumeID] && !force {
		return fmt.Errorf("%w: mounted", guestagent.ErrBusy)
	}
	delete(g.exposed, volumeID)
	return nil
}

func (g *recordingGuest) Resize(volumeID string) error {
	g.calls = append(g.calls, "resize "+volumeID)
	if _, ok := g.exposed[volumeID]; !ok {
		return guestagent.ErrNotAttached
	}
	return nil
}

func (g *recordingGuest) List() ([]guestagent.Disk, error) {
	var out []guestagent.Disk
	for id := range g.exposed {
		out = append(out, guestagent.Disk{VolumeID: id})
	}
	slices.SortFunc(out, func(a, b guestagent.Disk) int { return strings.Compare(a.VolumeID, b.VolumeID) })
	return out, nil
}

// TestGuestStore checks the store of an emulator that plays a VM: images
// are kept on the host, the guest is asked to expose them at the path it
// sees them under, and its answers map to the store's errors.
func TestGuestStore(t *testing.T) {
	testutil.RequireRoot(t)
	dataDir := t.TempDir()
	guest := &recordingGuest{exposed: map[string]string{}, busy: map[string]bool{}}
	s, err := NewGuestStore(dataDir, "/host/emulator", guest)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{volA, volB} {
		if err := s.CreateVolume(id, 64*mib); err != nil {
			t.Fatal(err)
		}
	}
	dev, err := s.Attach(volA)
	if err != nil || dev != "/dev/nvme-"+volA {
		t.Fatalf("Attach = %q, %v", dev, err)
	}
	if got := guest.exposed[volA]; got != "/host/emulator/volumes/"+volA+".img" {
		t.Fatalf("the guest was given %q, want the image's path in the guest", got)
	}
	if err := s.ResizeVolume(volA, 128*mib); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dataDir + "/volumes/" + volA + ".img"); err != nil || st.Size() != 128*mib {
		t.Fatalf("image after ResizeVolume: %v, %v", st, err)
	}
	if err := s.ResizeVolume(volB, 128*mib); err != nil {
		t.Fatalf("ResizeVolume of a volume the guest does not expose: %v", err)
	}
	guest.busy[volA] = true
	if err := s.Detach(volA, false); !errors.Is(err, ErrBusy) {
		t.Fatalf("Detach of a volume busy in the guest = %v, want ErrBusy", err)
	}

	// After a restart the model says only B is attached: A is removed from
	// the guest, forcibly, and B is exposed.
	guest.calls = nil
	if err := s.Reconcile([]string{volB}); err != nil {
		t.Fatal(err)
	}
	want := []string{"detach " + volA + " force=true", "attach " + volB}
	if !slices.Equal(guest.calls, want) {
		t.Fatalf("Reconcile called %v, want %v", guest.calls, want)
	}
	if err := s.Detach(volB, false); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{volA, volB} {
		if err := s.DeleteVolume(id); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNewGuestStoreWantsAGuestPath(t *testing.T) {
	if _, err := NewGuestStore(t.TempDir(), "relative/dir", &recordingGuest{}); err == nil {
		t.Fatal("a relative guest data directory was accepted")
	}
}
