//go:build bench

package bench

import (
	"context"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/testutil/motoserver"
)

// motoBackendName names moto in the results.
const motoBackendName = "moto_server"

// motoAvailable reports whether moto_server is on PATH for the moto run.
func motoAvailable() bool {
	_, err := exec.LookPath(motoserver.Command)
	return err == nil
}

// motoBackend starts a moto_server of the run's own with the instances the
// lifecycles attach to, behind a proxy that counts the requests a
// controller sends it (moto has no metrics of its own). Its changes are
// instant: a volume is available, attached or detached when the request
// that asked for it is answered.
func motoBackend(t *testing.T) backend {
	srv := motoserver.Start(t)
	account := srv.DefaultAccount()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var nodes []string
	for range instances {
		id, err := account.RunInstance(ctx, zone, "m5.large")
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, id)
	}
	proxy := startCountingProxy(t, srv.URL)
	var env []string
	for k, v := range srv.Environ() {
		if k == "AWS_ENDPOINT_URL_EC2" {
			v = proxy.url
		}
		env = append(env, k+"="+v)
	}
	return backend{name: motoBackendName, env: env, diskplaneFlags: []string{"--client-token-memory=0"}, nodes: nodes, calls: proxy.calls}
}

// countingProxy passes EC2 Query API requests on to a backend and counts
// them by action, and those answered with an error by action and HTTP
// status, as ec2-emulator's metrics count the requests it answers.
type countingProxy struct {
	url string

	mu     sync.Mutex
	byAct  map[string]int
	errors map[string]int
}

// startCountingProxy serves a counting proxy to target on a loopback port
// until the test ends.
func startCountingProxy(t *testing.T, target string) *countingProxy {
	to, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{url: "http://" + l.Addr().String(), byAct: map[string]int{}, errors: map[string]int{}}
	forward := httputil.NewSingleHostReverseProxy(to)
	forward.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode >= 400 {
			action, _ := resp.Request.Context().Value(actionKey{}).(string)
			p.mu.Lock()
			p.errors[action+" HTTP "+strconv.Itoa(resp.StatusCode)]++
			p.mu.Unlock()
		}
		return nil
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		action, err := motoserver.RequestAction(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.byAct[action]++
		p.mu.Unlock()
		forward.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), actionKey{}, action)))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// actionKey carries a request's action to the proxy's response hook.
type actionKey struct{}

// calls returns copies of the counts so far.
func (p *countingProxy) calls(*testing.T) (byAction, errors map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.byAct), maps.Clone(p.errors)
}
