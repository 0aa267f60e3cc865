package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestServe(t *testing.T) {
	tests := []struct {
		name       string
		health     error
		wantStatus int
		wantBody   string
	}{
		{name: "healthy", wantStatus: http.StatusOK, wantBody: "ok"},
		{name: "unhealthy", health: errors.New("cloud unreachable"), wantStatus: http.StatusInternalServerError, wantBody: "cloud unreachable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := NewRegistry()
			counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "diskplane_test_total", Help: "test"})
			reg.MustRegister(counter)
			counter.Inc()

			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- ServeListener(ctx, l, reg, func(context.Context) error { return tc.health })
			}()
			base := "http://" + l.Addr().String()

			status, body := get(t, base+"/healthz")
			if status != tc.wantStatus || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("/healthz = %d %q, want %d containing %q", status, body, tc.wantStatus, tc.wantBody)
			}
			status, body = get(t, base+"/metrics")
			if status != http.StatusOK || !strings.Contains(body, "diskplane_test_total 1") || !strings.Contains(body, "go_goroutines") {
				t.Fatalf("/metrics = %d, body lacks registered metrics:\n%s", status, body)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("ServeListener after cancel: %v", err)
			}
		})
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
