package csiproxyapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/emulator/winhost"
)

// TestAdminFaults arms the host's faults over the admin API: the next
// Rescan fails once, and a fault without its operation is refused.
func TestAdminFaults(t *testing.T) {
	src := &winhost.StaticSource{}
	h, err := winhost.New(winhost.Config{Source: src, Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(AdminHandler(h))
	defer srv.Close()
	post := func(body string) int {
		resp, err := http.Post(srv.URL+PathFaults, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(`{"failNext": [{"op": "Rescan"}], "delayNewVolumes": 1}`); code != http.StatusNoContent {
		t.Fatalf("POST %s = %d", PathFaults, code)
	}
	if err := h.Rescan(); !errors.Is(err, winhost.ErrInjected) {
		t.Fatalf("the first Rescan after the fault = %v, want ErrInjected", err)
	}
	if err := h.Rescan(); err != nil {
		t.Fatalf("the second Rescan = %v, want it to work again", err)
	}
	if code := post(`{"failNext": [{"after": true}]}`); code != http.StatusBadRequest {
		t.Fatalf("a fault without its operation = %d, want 400", code)
	}
}
