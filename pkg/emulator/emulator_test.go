package emulator

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "in memory", cfg: Config{}},
		{name: "devices need a data directory", cfg: Config{Devices: true}, wantErr: "need a data directory"},
		{name: "bad faults", cfg: Config{Faults: faults.Config{EventualConsistency: -1}}, wantErr: "faults"},
		{name: "bad cloud", cfg: Config{Cloud: model.Config{Instances: []model.InstanceSpec{{Type: "z1.tiny"}}}}, wantErr: "unknown instance type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(tc.cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close() })
			in := e.localInstance()
			local, zone, _ := e.Cloud.LocalInstance()
			if in.ID != local.ID || in.AvailabilityZoneID != zone.ID || in.BlockDeviceMappings["root"] != "/dev/xvda" ||
				len(in.NetworkInterfaces) != 1 || in.NetworkInterfaces[0].MAC != local.NetworkInterfaces[0].MAC {
				t.Fatalf("IMDS instance %+v for %+v", in, local)
			}
		})
	}
}

func TestServeStopsGracefully(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ls := Listeners{EC2: listen(), Admin: listen()}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, ls) }()
	resp, err := http.Get("http://" + ls.Admin.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %s", resp.Status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after the stop: %v", err)
	}
	if _, err := http.Get("http://" + ls.EC2.Addr().String()); err == nil {
		t.Fatal("the EC2 listener still answers after the stop")
	}
}
