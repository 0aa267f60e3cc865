package winhost

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/diskplane/diskplane/pkg/emulator/model"
)

const gib = int64(1) << 30

// EC2Source is the EC2 emulator's view of one instance, read from its admin
// API: the volumes attached to the instance (attached, or detaching and so
// still present) are the host's disks, its root volume the boot disk.
type EC2Source struct {
	// AdminURL is the EC2 emulator's admin listener, http://host:port.
	AdminURL string
	// InstanceID is the instance this host plays; empty means the
	// emulator's local instance.
	InstanceID string
	// Client makes the requests; nil means http.DefaultClient.
	Client *http.Client

	mu       sync.Mutex
	instance string // InstanceID, or the local instance once looked up
}

// Attached implements Source.
func (s *EC2Source) Attached(ctx context.Context) ([]Attached, error) {
	instance, err := s.instanceID(ctx)
	if err != nil {
		return nil, err
	}
	var volumes []model.Volume
	if err := s.get(ctx, "/volumes", &volumes); err != nil {
		return nil, err
	}
	var out []Attached
	for _, v := range volumes {
		for _, a := range v.Attachments {
			if a.InstanceID == instance && (a.State == model.AttachmentAttached || a.State == model.AttachmentDetaching) {
				out = append(out, Attached{VolumeID: v.ID, SizeBytes: int64(v.Size) * gib, Boot: v.Root})
			}
		}
	}
	return out, nil
}

func (s *EC2Source) instanceID(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.instance != "" {
		return s.instance, nil
	}
	if s.InstanceID != "" {
		s.instance = s.InstanceID
		return s.instance, nil
	}
	var instances []model.Instance
	if err := s.get(ctx, "/instances", &instances); err != nil {
		return "", err
	}
	for _, in := range instances {
		if in.Local {
			s.instance = in.ID
			return s.instance, nil
		}
	}
	return "", fmt.Errorf("the EC2 emulator at %s has no local instance", s.AdminURL)
}

func (s *EC2Source) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(s.AdminURL, "/")+path, nil)
	if err != nil {
		return err
	}
	c := s.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// StaticSource is a fixed set of attached volumes that a test changes as it
// goes.
type StaticSource struct {
	mu       sync.Mutex
	attached []Attached
}

// Attached implements Source.
func (s *StaticSource) Attached(context.Context) ([]Attached, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Attached(nil), s.attached...), nil
}

// Attach attaches a volume of sizeBytes, or changes its size if attached.
func (s *StaticSource) Attach(a Attached) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.attached {
		if s.attached[i].VolumeID == a.VolumeID {
			s.attached[i] = a
			return
		}
	}
	s.attached = append(s.attached, a)
}

// Detach detaches a volume.
func (s *StaticSource) Detach(volumeID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.attached {
		if s.attached[i].VolumeID == volumeID {
			s.attached = append(s.attached[:i], s.attached[i+1:]...)
			return
		}
	}
}
