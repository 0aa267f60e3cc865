package metadata

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	emuimds "github.com/diskplane/diskplane/pkg/emulator/imds"
)

// emulatedInstance is a fully described instance with two network
// interfaces and a launch-time block device mapping.
func emulatedInstance() emuimds.Instance {
	return emuimds.Instance{
		ID:                 "i-0123456789abcdef0",
		Type:               "m5.large",
		AccountID:          "123456789012",
		Region:             "us-east-1",
		AvailabilityZone:   "us-east-1a",
		AvailabilityZoneID: "use1-az6",
		PendingTime:        time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		NetworkInterfaces: []emuimds.NetworkInterface{
			{MAC: "0e:00:00:00:00:01", ID: "eni-1", DeviceNumber: 0, PrivateIPv4s: []string{"10.0.0.5"}},
			{MAC: "0e:00:00:00:00:02", ID: "eni-2", DeviceNumber: 1, PrivateIPv4s: []string{"10.0.1.7"}},
		},
		BlockDeviceMappings: map[string]string{"ami": "/dev/xvda", "root": "/dev/xvda", "ebs1": "sdb"},
	}
}

// serveIMDS serves the emulator's IMDS for in, passing every request
// through intercept first when it is set (it returns true when it answered).
func serveIMDS(t *testing.T, in emuimds.Instance, opts emuimds.Options,
	intercept func(http.ResponseWriter, *http.Request) bool) *httptest.Server {
	t.Helper()
	h := emuimds.NewHandler(func(string) emuimds.Instance { return in }, opts)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if intercept != nil && intercept(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// failPath answers status for one metadata path.
func failPath(path string, status int) func(http.ResponseWriter, *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/latest/meta-data/"+path {
			return false
		}
		http.Error(w, http.StatusText(status), status)
		return true
	}
}

// deadEndpoint returns the URL of a server that is no longer listening.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}

func TestIMDSSource(t *testing.T) {
	full := &Instance{
		ID: "i-0123456789abcdef0", Type: "m5.large", Region: "us-east-1", Zone: "us-east-1a",
		ZoneID: "use1-az6", NetworkInterfaces: 2,
		BlockDeviceMappings: map[string]string{"ami": "/dev/xvda", "root": "/dev/xvda", "ebs1": "sdb"},
	}
	tests := []struct {
		name      string
		edit      func(*emuimds.Instance)
		opts      emuimds.Options
		intercept func(http.ResponseWriter, *http.Request) bool
		want      *Instance
		wantErr   string
	}{
		{name: "everything", want: full},
		{name: "tokens required", opts: emuimds.Options{RequireToken: true}, want: full},
		{
			name: "no zone ID, no listed interfaces, no block device mapping",
			edit: func(in *emuimds.Instance) {
				in.AvailabilityZoneID, in.NetworkInterfaces, in.BlockDeviceMappings = "", nil, nil
			},
			want: &Instance{ID: full.ID, Type: full.Type, Region: full.Region, Zone: full.Zone, NetworkInterfaces: 1},
		},
		{
			name:    "identity document without an instance type",
			edit:    func(in *emuimds.Instance) { in.Type = "" },
			wantErr: "no instanceType",
		},
		{
			name:      "a server error on an optional path fails the source",
			intercept: failPath("placement/availability-zone-id", http.StatusInternalServerError),
			wantErr:   "read " + zoneIDPath,
		},
		{
			name:      "a missing mapping entry fails the source",
			intercept: failPath("block-device-mapping/ebs1", http.StatusNotFound),
			wantErr:   "read block-device-mapping/ebs1",
		},
		{
			name: "a refused token request fails instead of falling back to IMDSv1",
			intercept: func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodPut {
					http.Error(w, "forbidden", http.StatusForbidden)
					return true
				}
				return false
			},
			wantErr: "instance identity document",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := emulatedInstance()
			if tc.edit != nil {
				tc.edit(&in)
			}
			srv := serveIMDS(t, in, tc.opts, tc.intercept)
			got, err := fromIMDS(t.Context(), Options{IMDSEndpoint: srv.URL})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			assertInstance(t, got, tc.want)
		})
	}
}

func TestIMDSEndpointFromEnvironment(t *testing.T) {
	srv := serveIMDS(t, emulatedInstance(), emuimds.Options{}, nil)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", srv.URL)
	got, err := fromIMDS(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "i-0123456789abcdef0" {
		t.Fatalf("ID = %q", got.ID)
	}
}

func TestIMDSUnreachable(t *testing.T) {
	_, err := fromIMDS(t.Context(), Options{IMDSEndpoint: deadEndpoint(t)})
	if err == nil {
		t.Fatal("want an error from a dead endpoint")
	}
	if !strings.Contains(err.Error(), "hop limit") {
		t.Errorf("err = %v; want the hop-limit hint", err)
	}
	if status := httpStatus(err); status != 0 {
		t.Errorf("httpStatus = %d for a connection failure, want 0", status)
	}
}

func TestIMDSHonoursTheContext(t *testing.T) {
	srv := serveIMDS(t, emulatedInstance(), emuimds.Options{}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := fromIMDS(ctx, Options{IMDSEndpoint: srv.URL})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if strings.Contains(err.Error(), "hop limit") {
		t.Errorf("err = %v; a cancellation is not an unreachable IMDS", err)
	}
}

func assertInstance(t *testing.T, got, want *Instance) {
	t.Helper()
	if got.ID != want.ID || got.Type != want.Type || got.Region != want.Region || got.Zone != want.Zone ||
		got.ZoneID != want.ZoneID || got.NetworkInterfaces != want.NetworkInterfaces ||
		!maps.Equal(got.BlockDeviceMappings, want.BlockDeviceMappings) ||
		(got.BlockDeviceMappings == nil) != (want.BlockDeviceMappings == nil) {
		t.Fatalf("instance = %+v\nwant       %+v", got, want)
	}
}
