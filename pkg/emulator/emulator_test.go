package emulator

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
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
		{name: "a view needs devices", cfg: Config{Cloud: model.Config{Instances: []model.InstanceSpec{
			{ID: "i-0123456789abcdef1", View: &disks.View{LinkDir: "/tmp/x"}}}}}, wantErr: "needs the host's loop devices"},
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
			in := e.callingInstance("127.0.0.1")
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

// TestIMDSAnswersTheCallingInstance checks that IMDS describes the instance
// with a view whose address the request comes from, as EC2's answers each
// instance about itself, and the local instance for every other caller:
// several nodes of a local cluster share one emulator.
func TestIMDSAnswersTheCallingInstance(t *testing.T) {
	dir := t.TempDir()
	cloud, err := model.New(model.Config{Store: disks.NewStateOnlyStore(), Instances: []model.InstanceSpec{
		{ID: "i-0123456789abcdef0", Local: true},
		{ID: "i-0123456789abcdef1", Zone: "us-east-1b", PrivateIP: "10.89.0.11", View: &disks.View{LinkDir: dir + "/1"}},
		{ID: "i-0123456789abcdef2", PrivateIP: "10.89.0.12", View: &disks.View{LinkDir: dir + "/2"}},
		{ID: "i-0123456789abcdef3", PrivateIP: "10.89.0.13"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cloud.Close() })
	e := &Emulator{Cloud: cloud}
	tests := []struct{ caller, wantID, wantZone string }{
		{caller: "10.89.0.11", wantID: "i-0123456789abcdef1", wantZone: "us-east-1b"},
		{caller: "10.89.0.12", wantID: "i-0123456789abcdef2", wantZone: "us-east-1a"},
		// An instance without a view is not played by this host: its
		// address is the local instance's caller like any other.
		{caller: "10.89.0.13", wantID: "i-0123456789abcdef0", wantZone: "us-east-1a"},
		{caller: "127.0.0.1", wantID: "i-0123456789abcdef0", wantZone: "us-east-1a"},
		{caller: "", wantID: "i-0123456789abcdef0", wantZone: "us-east-1a"},
	}
	for _, tc := range tests {
		in := e.callingInstance(tc.caller)
		if in.ID != tc.wantID || in.AvailabilityZone != tc.wantZone {
			t.Errorf("caller %q: IMDS describes %s in %s, want %s in %s", tc.caller, in.ID, in.AvailabilityZone, tc.wantID, tc.wantZone)
		}
		if tc.caller != "" && tc.wantID != "i-0123456789abcdef0" && in.NetworkInterfaces[0].PrivateIPv4s[0] != tc.caller {
			t.Errorf("caller %q: primary address %v", tc.caller, in.NetworkInterfaces[0].PrivateIPv4s)
		}
	}
}
