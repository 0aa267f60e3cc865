package imds

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// testInstance is a fully described instance with two interfaces.
func testInstance() Instance {
	return Instance{
		ID:                 "i-0123456789abcdef0",
		Type:               "m5.large",
		ImageID:            "ami-0abcdef1234567890",
		AccountID:          "123456789012",
		Region:             "us-east-1",
		AvailabilityZone:   "us-east-1a",
		AvailabilityZoneID: "use1-az6",
		PendingTime:        time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		NetworkInterfaces: []NetworkInterface{
			{MAC: "0e:00:00:00:00:02", ID: "eni-2", DeviceNumber: 1, PrivateIPv4s: []string{"10.0.1.7"}},
			{MAC: "0e:00:00:00:00:01", ID: "eni-1", DeviceNumber: 0, PrivateIPv4s: []string{"10.0.0.5", "10.0.0.6"},
				SubnetID: "subnet-1", VPCID: "vpc-1"},
		},
		BlockDeviceMappings: map[string]string{"ami": "/dev/xvda", "root": "/dev/xvda", "ebs1": "sdb"},
	}
}

// fakeClock is a settable clock for token expiry.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTestServer(t *testing.T, in Instance, opts Options) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewHandler(func(string) Instance { return in }, opts))
	t.Cleanup(srv.Close)
	return srv
}

// do sends one request and returns the status and body.
func do(t *testing.T, method, url string, header map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func TestMetadataPaths(t *testing.T) {
	srv := newTestServer(t, testInstance(), Options{})
	metaData := strings.Join([]string{
		"ami-id", "ami-launch-index", "block-device-mapping/", "hostname", "instance-id",
		"instance-life-cycle", "instance-type", "local-hostname", "local-ipv4", "mac",
		"network/", "placement/", "services/"}, "\n")
	tests := []struct {
		path       string
		wantStatus int
		want       string
	}{
		{path: "/", wantStatus: 200, want: "latest"},
		{path: "/latest", wantStatus: 200, want: "dynamic/\nmeta-data/"},
		{path: "/latest/", wantStatus: 200, want: "dynamic/\nmeta-data/"},
		{path: "/latest/meta-data/", wantStatus: 200, want: metaData},
		{path: "/latest/meta-data", wantStatus: 200, want: metaData},
		{path: "/latest/meta-data/instance-id", wantStatus: 200, want: "i-0123456789abcdef0"},
		{path: "/latest/meta-data/instance-type", wantStatus: 200, want: "m5.large"},
		{path: "/latest/meta-data/ami-id", wantStatus: 200, want: "ami-0abcdef1234567890"},
		{path: "/latest/meta-data/local-ipv4", wantStatus: 200, want: "10.0.0.5"},
		{path: "/latest/meta-data/hostname", wantStatus: 200, want: "ip-10-0-0-5.ec2.internal"},
		{path: "/latest/meta-data/mac", wantStatus: 200, want: "0e:00:00:00:00:01"},
		{path: "/latest/meta-data/placement/", wantStatus: 200, want: "availability-zone\navailability-zone-id\nregion"},
		{path: "/latest/meta-data/placement/availability-zone", wantStatus: 200, want: "us-east-1a"},
		{path: "/latest/meta-data/placement/availability-zone-id", wantStatus: 200, want: "use1-az6"},
		{path: "/latest/meta-data/placement/region", wantStatus: 200, want: "us-east-1"},
		{path: "/latest/meta-data/network/", wantStatus: 200, want: "interfaces/"},
		{path: "/latest/meta-data/network/interfaces/", wantStatus: 200, want: "macs/"},
		{path: "/latest/meta-data/network/interfaces/macs/", wantStatus: 200, want: "0e:00:00:00:00:01/\n0e:00:00:00:00:02/"},
		{path: "/latest/meta-data/network/interfaces/macs/0e:00:00:00:00:01/", wantStatus: 200,
			want: "device-number\ninterface-id\nlocal-hostname\nlocal-ipv4s\nmac\nowner-id\nsubnet-id\nvpc-id"},
		{path: "/latest/meta-data/network/interfaces/macs/0e:00:00:00:00:01/local-ipv4s", wantStatus: 200, want: "10.0.0.5\n10.0.0.6"},
		{path: "/latest/meta-data/network/interfaces/macs/0e:00:00:00:00:02/device-number", wantStatus: 200, want: "1"},
		{path: "/latest/meta-data/network/interfaces/macs/0e:00:00:00:00:02/interface-id", wantStatus: 200, want: "eni-2"},
		{path: "/latest/meta-data/network/interfaces/macs/0e:00:00:00:00:02/owner-id", wantStatus: 200, want: "123456789012"},
		{path: "/latest/meta-data/block-device-mapping/", wantStatus: 200, want: "ami\nebs1\nroot"},
		{path: "/latest/meta-data/block-device-mapping/ebs1", wantStatus: 200, want: "sdb"},
		{path: "/latest/meta-data/block-device-mapping/root", wantStatus: 200, want: "/dev/xvda"},
		{path: "/latest/meta-data/services/partition", wantStatus: 200, want: "aws"},
		{path: "/latest/dynamic/", wantStatus: 200, want: "instance-identity/"},
		{path: "/latest/dynamic/instance-identity/", wantStatus: 200, want: "document"},
		{path: "/latest/meta-data/no-such-entry", wantStatus: 404, want: "404 - Not Found"},
		{path: "/latest/meta-data/instance-id/deeper", wantStatus: 404, want: "404 - Not Found"},
		{path: "/latest/meta-data/block-device-mapping/ebs9", wantStatus: 404, want: "404 - Not Found"},
		{path: "/latest/meta-data/iam/security-credentials/", wantStatus: 404, want: "404 - Not Found"},
		{path: "/latest/user-data", wantStatus: 404, want: "404 - Not Found"},
		{path: "/2009-04-04/meta-data/", wantStatus: 404, want: "404 - Not Found"},
		{path: "/latestx", wantStatus: 404, want: "404 - Not Found"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			status, body, hdr := do(t, http.MethodGet, srv.URL+tc.path, nil)
			if status != tc.wantStatus {
				t.Fatalf("GET %s = %d %q, want %d", tc.path, status, body, tc.wantStatus)
			}
			if tc.wantStatus == 200 {
				if body != tc.want {
					t.Fatalf("GET %s body = %q, want %q", tc.path, body, tc.want)
				}
				if ct := hdr.Get("Content-Type"); ct != "text/plain" {
					t.Fatalf("GET %s Content-Type = %q, want text/plain", tc.path, ct)
				}
				return
			}
			if !strings.Contains(body, tc.want) {
				t.Fatalf("GET %s error body = %q, want it to contain %q", tc.path, body, tc.want)
			}
		})
	}
}

func TestOptionalEntriesLeftOut(t *testing.T) {
	in := Instance{ID: "i-1", Type: "t3.micro", Region: "eu-west-1", AvailabilityZone: "eu-west-1b"}
	srv := newTestServer(t, in, Options{})
	tests := []struct {
		path       string
		wantStatus int
		want       string
	}{
		{path: "/latest/meta-data/", wantStatus: 200, want: "ami-launch-index\ninstance-id\ninstance-life-cycle\ninstance-type\nnetwork/\nplacement/\nservices/"},
		{path: "/latest/meta-data/placement/", wantStatus: 200, want: "availability-zone\nregion"},
		{path: "/latest/meta-data/network/interfaces/macs/", wantStatus: 200, want: ""},
		{path: "/latest/meta-data/mac", wantStatus: 404},
		{path: "/latest/meta-data/block-device-mapping/", wantStatus: 404},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			status, body, _ := do(t, http.MethodGet, srv.URL+tc.path, nil)
			if status != tc.wantStatus || (status == 200 && body != tc.want) {
				t.Fatalf("GET %s = %d %q, want %d %q", tc.path, status, body, tc.wantStatus, tc.want)
			}
		})
	}
}

func TestHostnameOutsideUSEast1(t *testing.T) {
	in := testInstance()
	in.Region, in.AvailabilityZone = "eu-west-1", "eu-west-1a"
	srv := newTestServer(t, in, Options{})
	status, body, _ := do(t, http.MethodGet, srv.URL+"/latest/meta-data/local-hostname", nil)
	if status != 200 || body != "ip-10-0-0-5.eu-west-1.compute.internal" {
		t.Fatalf("local-hostname = %d %q", status, body)
	}
}

func TestIdentityDocument(t *testing.T) {
	srv := newTestServer(t, testInstance(), Options{})
	status, body, _ := do(t, http.MethodGet, srv.URL+"/latest/dynamic/instance-identity/document", nil)
	if status != 200 {
		t.Fatalf("document = %d %q", status, body)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("document is not JSON: %v\n%s", err, body)
	}
	want := map[string]any{
		"accountId": "123456789012", "architecture": "x86_64", "availabilityZone": "us-east-1a",
		"imageId": "ami-0abcdef1234567890", "instanceId": "i-0123456789abcdef0", "instanceType": "m5.large",
		"pendingTime": "2026-01-02T03:04:05Z", "privateIp": "10.0.0.5", "region": "us-east-1",
		"version": "2017-09-30", "kernelId": nil, "ramdiskId": nil, "billingProducts": nil,
		"devpayProductCodes": nil, "marketplaceProductCodes": nil,
	}
	for k, v := range want {
		got, ok := doc[k]
		if !ok || got != v {
			t.Errorf("document[%q] = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if len(doc) != len(want) {
		t.Errorf("document has %d fields, want %d: %s", len(doc), len(want), body)
	}
}

// TestSourceCalledPerRequest checks that the handler shows the model's
// current state rather than a copy taken at construction.
func TestSourceCalledPerRequest(t *testing.T) {
	var mu sync.Mutex
	in := testInstance()
	srv := httptest.NewServer(NewHandler(func(string) Instance {
		mu.Lock()
		defer mu.Unlock()
		return in
	}, Options{}))
	t.Cleanup(srv.Close)
	url := srv.URL + "/latest/meta-data/block-device-mapping/"
	if _, body, _ := do(t, http.MethodGet, url, nil); body != "ami\nebs1\nroot" {
		t.Fatalf("before: %q", body)
	}
	mu.Lock()
	in.BlockDeviceMappings = map[string]string{"ami": "/dev/xvda", "root": "/dev/xvda", "ebs1": "sdb", "ebs2": "sdc"}
	mu.Unlock()
	if _, body, _ := do(t, http.MethodGet, url, nil); body != "ami\nebs1\nebs2\nroot" {
		t.Fatalf("after: %q", body)
	}
}

// fixed is a source that answers every caller with the same instance.
func fixed(in Instance) func(string) Instance {
	return func(string) Instance { return in }
}
