// Package motoserver runs moto, the independent AWS mock, for the tests that
// prove Diskplane against an EC2, STS and KMS this project did not write
// (make test-moto). ec2-emulator and the driver are written by one team and
// may share a misreading of EC2; moto is written by others from the same API
// reference, so a test green against both is green for a reason.
//
// A Server is one moto_server process on a loopback port. Tests of one
// process share a server (Shared) and keep apart by account: every Account
// is a fresh AWS account of moto's, chosen per request with moto's
// x-moto-account-id header, so parallel tests never see each other's
// volumes. A process under test (the diskplane binary) reaches a server
// through the SDK's standard variables only (Environ), in moto's default
// account.
package motoserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/diskplane/diskplane/pkg/testutil"
)

const (
	// Command is moto's server; make test-moto expects it on PATH.
	Command = "moto_server"
	// Region is the region the tests use; moto serves every region.
	Region = "us-east-1"
	// DefaultAccountID is the account moto answers for when a request
	// names none: the one a process under test uses.
	DefaultAccountID = "123456789012"
	// BackendEnv selects the EC2 a package's backend-neutral tests run
	// against: "moto" for this server, anything else for ec2-emulator.
	BackendEnv = "DISKPLANE_TEST_EC2"
)

// Selected reports whether this test process runs its backend-neutral
// tests against moto (BackendEnv=moto, as make test-moto sets it).
func Selected() bool { return os.Getenv(BackendEnv) == "moto" }

// Server is a running moto_server.
type Server struct {
	// URL is the endpoint of every service moto mocks (EC2, STS, KMS),
	// through the harness's front (see Unimplemented).
	URL string
	// backend is moto_server's own endpoint, behind the front (see
	// Unimplemented).
	backend string
	front   *http.Server
	cmd     *exec.Cmd
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns this process's moto_server, started on first use and
// killed when the process exits. Without moto_server on PATH the test is
// skipped loudly (a failure under DISKPLANE_REQUIRE_MOTO_TESTS=1).
func Shared(t testing.TB) *Server {
	t.Helper()
	require(t)
	shared.once.Do(func() { shared.srv, shared.err = start() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

// Start runs a moto_server of the test's own, stopped when the test ends:
// for a process under test, which can only use moto's default account.
func Start(t testing.TB) *Server {
	t.Helper()
	require(t)
	srv, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.stop)
	return srv
}

// stop ends the server and its front.
func (s *Server) stop() {
	if s.front != nil {
		_ = s.front.Close()
	}
	_ = s.cmd.Process.Kill()
}

// RequireEnv names the environment variable that turns a test skipped for
// want of moto_server into a failure (make test-moto sets it).
const RequireEnv = "DISKPLANE_REQUIRE_MOTO_TESTS"

func require(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath(Command); err != nil {
		testutil.SkipLoudly(t, RequireEnv, "needs moto_server on PATH", "pip install 'moto[server]==5.2.1'")
	}
}

// startAttempts bounds the starts on a port another process took between
// the look for a free one and moto's bind.
const startAttempts = 3

// start launches moto_server on a free loopback port and waits until it
// answers. moto takes the port on its command line, so the port is found
// free first; when another process takes it in between, moto exits with
// "Address already in use" and start tries another port.
func start() (*Server, error) {
	for attempt := 1; ; attempt++ {
		srv, err := startOnce()
		if err == nil || attempt == startAttempts || !strings.Contains(err.Error(), "Address already in use") {
			return srv, err
		}
	}
}

// startOnce is one start of moto_server.
func startOnce() (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	log := &testutil.LogBuffer{}
	cmd := exec.Command(Command, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = serverEnviron()
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", Command, err)
	}
	srv := &Server{backend: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(srv.backend + "/moto-api/data.json")
		if err == nil {
			_ = resp.Body.Close()
			if srv.front, srv.URL, err = front(srv.backend); err != nil {
				_ = cmd.Process.Kill()
				return nil, err
			}
			if err := srv.warmUp(); err != nil {
				srv.stop()
				return nil, fmt.Errorf("%w: %s", err, log.String())
			}
			return srv, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("%s exited before it answered (%v): %s", Command, err, log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return nil, errors.New(Command + " did not answer within 30 s: " + log.String())
		}
	}
}

// serverEnviron is the environment moto_server runs with: this process's
// without its AWS settings, which moto reads through botocore (a test's
// empty AWS_PROFILE would break the server every later test shares), and
// without moto's stock images. Those come with about 1,200 public snapshots
// that moto, ignoring DescribeSnapshots' OwnerIds, lists as every
// account's own; they also cost seconds per new account.
func serverEnviron() []string {
	env := []string{"MOTO_EC2_LOAD_DEFAULT_AMIS=false"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "MOTO_") {
			env = append(env, kv)
		}
	}
	return env
}

// warmUp sends one request to each service the tests use, one at a time.
// moto imports a service's code on its first request, and two first
// requests at once race in that import: one fails with a 500 (a half-
// imported module) or never answers.
func (s *Server) warmUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := s.DefaultAccount().AWSConfig("AKIDMOTO", "moto-secret")
	if _, err := ec2.NewFromConfig(cfg).DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{}); err != nil {
		return fmt.Errorf("warm moto's EC2 up: %w", err)
	}
	if _, err := sts.NewFromConfig(cfg).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{}); err != nil {
		return fmt.Errorf("warm moto's STS up: %w", err)
	}
	if _, err := kms.NewFromConfig(cfg).ListKeys(ctx, &kms.ListKeysInput{}); err != nil {
		return fmt.Errorf("warm moto's KMS up: %w", err)
	}
	return nil
}

// Environ is the environment a process under test needs to use this
// server through the SDK's standard settings only, in moto's default
// account: the endpoints of EC2, STS and KMS, the region, static keys, and
// no instance metadata (a controller is not on an instance).
func (s *Server) Environ() map[string]string {
	return map[string]string{
		"AWS_ENDPOINT_URL_EC2":      s.URL,
		"AWS_ENDPOINT_URL_STS":      s.URL,
		"AWS_ENDPOINT_URL_KMS":      s.URL,
		"AWS_REGION":                Region,
		"AWS_ACCESS_KEY_ID":         "AKIDMOTO",
		"AWS_SECRET_ACCESS_KEY":     "moto-secret",
		"AWS_EC2_METADATA_DISABLED": "true",
	}
}
