package imds

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	sdkimds "github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// countingServer serves the handler and counts the token requests it sees,
// so a test can tell IMDSv2 from IMDSv1 traffic.
func countingServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var puts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Path == tokenPath {
			puts.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &puts
}

func readMetadata(t *testing.T, c *sdkimds.Client, path string) string {
	t.Helper()
	out, err := c.GetMetadata(t.Context(), &sdkimds.GetMetadataInput{Path: path})
	if err != nil {
		t.Fatalf("GetMetadata(%q): %v", path, err)
	}
	defer out.Content.Close()
	b, err := io.ReadAll(out.Content)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSDKClient(t *testing.T) {
	tests := []struct {
		name         string
		requireToken bool
		fallback     aws.Ternary
	}{
		{name: "default instance"},
		{name: "tokens required", requireToken: true, fallback: aws.FalseTernary},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, puts := countingServer(t, NewHandler(fixed(testInstance()), Options{RequireToken: tc.requireToken}))
			c := sdkimds.New(sdkimds.Options{Endpoint: srv.URL, EnableFallback: tc.fallback})
			ctx := t.Context()

			doc, err := c.GetInstanceIdentityDocument(ctx, &sdkimds.GetInstanceIdentityDocumentInput{})
			if err != nil {
				t.Fatalf("GetInstanceIdentityDocument: %v", err)
			}
			d := doc.InstanceIdentityDocument
			if d.InstanceID != "i-0123456789abcdef0" || d.InstanceType != "m5.large" || d.Region != "us-east-1" ||
				d.AvailabilityZone != "us-east-1a" || d.AccountID != "123456789012" || d.PrivateIP != "10.0.0.5" ||
				!d.PendingTime.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
				t.Fatalf("identity document = %+v", d)
			}
			region, err := c.GetRegion(ctx, &sdkimds.GetRegionInput{})
			if err != nil || region.Region != "us-east-1" {
				t.Fatalf("GetRegion = %+v, %v", region, err)
			}
			for path, want := range map[string]string{
				"instance-id":                                            "i-0123456789abcdef0",
				"placement/availability-zone-id":                         "use1-az6",
				"network/interfaces/macs/":                               "0e:00:00:00:00:01/\n0e:00:00:00:00:02/",
				"block-device-mapping/":                                  "ami\nebs1\nroot",
				"/block-device-mapping/ebs1":                             "sdb",
				"network/interfaces/macs/0e:00:00:00:00:02/interface-id": "eni-2",
			} {
				if got := readMetadata(t, c, path); got != want {
					t.Errorf("GetMetadata(%q) = %q, want %q", path, got, want)
				}
			}
			if puts.Load() == 0 {
				t.Fatal("the SDK never asked for an IMDSv2 token")
			}
		})
	}
}

func TestSDKClientNotFound(t *testing.T) {
	srv, _ := countingServer(t, NewHandler(fixed(testInstance()), Options{}))
	c := sdkimds.New(sdkimds.Options{Endpoint: srv.URL})
	_, err := c.GetMetadata(t.Context(), &sdkimds.GetMetadataInput{Path: "outpost-arn"})
	var status interface{ HTTPStatusCode() int }
	if !errors.As(err, &status) || status.HTTPStatusCode() != http.StatusNotFound {
		t.Fatalf("GetMetadata(outpost-arn) error = %v, want HTTP 404", err)
	}
}

// TestSDKRecoversFromExpiredToken expires the SDK's cached token on the
// server side: the SDK must get a 401, fetch a new token and succeed.
func TestSDKRecoversFromExpiredToken(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	srv, puts := countingServer(t, NewHandler(fixed(testInstance()), Options{RequireToken: true, Now: clock.Now}))
	c := sdkimds.New(sdkimds.Options{Endpoint: srv.URL, EnableFallback: aws.FalseTernary})
	if got := readMetadata(t, c, "instance-id"); got != "i-0123456789abcdef0" {
		t.Fatalf("instance-id = %q", got)
	}
	if n := puts.Load(); n != 1 {
		t.Fatalf("token requests after the first read = %d, want 1", n)
	}
	clock.Advance(time.Hour)
	if got := readMetadata(t, c, "instance-type"); got != "m5.large" {
		t.Fatalf("instance-type = %q", got)
	}
	if n := puts.Load(); n != 2 {
		t.Fatalf("token requests after expiry = %d, want 2", n)
	}
}

// TestSDKEndpointFromEnvironment reaches the handler the way the node plugin
// does: the shared config reads AWS_EC2_METADATA_SERVICE_ENDPOINT.
func TestSDKEndpointFromEnvironment(t *testing.T) {
	srv, _ := countingServer(t, NewHandler(fixed(testInstance()), Options{}))
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", srv.URL)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion("us-east-1"))
	if err != nil {
		t.Fatal(err)
	}
	c := sdkimds.NewFromConfig(cfg)
	if got := readMetadata(t, c, "placement/availability-zone"); got != "us-east-1a" {
		t.Fatalf("availability-zone = %q", got)
	}
}
