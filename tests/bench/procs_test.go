//go:build bench

package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/diskplane/diskplane/pkg/emulator/admin"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// process is a binary the benchmark started, with its log in the run's
// directory. It is killed when the test ends.
type process struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{} // closed when the process has ended
}

// start runs bin with args and env (added to this process's), its output in
// <dir>/<name>.log.
func start(t *testing.T, dir, name, bin string, env []string, args ...string) *process {
	t.Helper()
	log := filepath.Join(dir, name+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &process{name: name, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		// Stopped as Kubernetes stops a pod: SIGTERM, then SIGKILL.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
		_ = f.Close()
	})
	return p
}

// hasExited reports whether the process has ended.
func (p *process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// usage is what /proc says a process has used: CPU in clock ticks (user and
// system, as `ps` counts them) and its peak resident memory.
type usage struct {
	CPUTicks  int64 `json:"cpuTicks"`
	PeakRSSKB int64 `json:"peakRssKiB"`
	RSSKB     int64 `json:"rssKiB"`
}

// usage reads the process's CPU ticks and memory now.
func (p *process) usage(t *testing.T) usage {
	t.Helper()
	u, err := readUsage(p.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// readUsage reads a process's CPU ticks and memory from /proc.
func readUsage(pid int) (usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return usage{}, err
	}
	// The command name may hold spaces; the fields after it are fixed.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	u := usage{CPUTicks: utime + stime}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return usage{}, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		key, value, _ := strings.Cut(s.Text(), ":")
		kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		switch key {
		case "VmHWM":
			u.PeakRSSKB = kib
		case "VmRSS":
			u.RSSKB = kib
		}
	}
	return u, nil
}

// freePort returns a TCP port on the loopback nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// emulator is a running ec2-emulator.
type emulator struct {
	*process
	ec2, imds, admin string // base URLs
}

// emulatorStartAttempts is how many times startEmulator picks ports: a
// port found free can be taken, before the emulator binds it, by another
// process's outgoing connection (the loopback ports freePort hands out are
// the kernel's ephemeral ones).
const emulatorStartAttempts = 3

// startEmulator runs ec2-emulator with the given extra flags, listening on
// free loopback ports, and waits until it answers. An emulator that could
// not bind a port is started again on others.
func startEmulator(t *testing.T, dir, name string, args ...string) *emulator {
	t.Helper()
	for attempt := 1; ; attempt++ {
		ports := [3]int{freePort(t), freePort(t), freePort(t)}
		e := &emulator{
			ec2:   fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
			imds:  fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
			admin: fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
		}
		all := append([]string{
			fmt.Sprintf("--listen=127.0.0.1:%d", ports[0]), fmt.Sprintf("--imds-listen=127.0.0.1:%d", ports[1]),
			fmt.Sprintf("--admin-listen=127.0.0.1:%d", ports[2]),
		}, args...)
		e.process = start(t, dir, name, binary(t, "ec2-emulator"), nil, all...)
		waitFor(t, name+" to answer", time.Minute, func() bool {
			if e.hasExited() {
				return true
			}
			resp, err := http.Get(e.admin + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		if !e.hasExited() {
			return e
		}
		log, _ := os.ReadFile(e.log)
		if !strings.Contains(string(log), "address already in use") || attempt == emulatorStartAttempts {
			t.Fatalf("%s ended before it answered; its log:\n%s", name, log)
		}
		t.Logf("%s could not bind a port found free (attempt %d); starting it on others", name, attempt)
	}
}

// readsPattern reads one sample of ec2_emulator_api_read_selections_total.
var readsPattern = regexp.MustCompile(`^ec2_emulator_api_read_selections_total\{action="([^"]+)",selection="([^"]+)"\} ([0-9.e+]+)$`)

// reads returns the Describe requests the emulator answered so far, by
// action and what they selected ("DescribeVolumes filters": the lookups by
// a volume's name tag).
func (e *emulator) reads(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	scrapeMetrics(t, e.admin, func(line string) {
		if m := readsPattern.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseFloat(m[3], 64)
			out[m[1]+" "+m[2]] += int(n)
		}
	})
	return out
}

// scrapeMetrics hands each line of the emulator's /metrics to line.
func scrapeMetrics(t *testing.T, admin string, line func(string)) {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line(s.Text())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
}

// callsPattern reads one sample of ec2_emulator_api_requests_total.
var callsPattern = regexp.MustCompile(`^ec2_emulator_api_requests_total\{action="([^"]+)",code="([^"]+)"\} ([0-9.e+]+)$`)

// draws returns the times the emulator gave its state changes (its admin
// API's GET /transitions).
func (e *emulator) draws(t *testing.T) []model.Draw {
	t.Helper()
	ds, err := (&admin.Client{URL: e.admin}).Transitions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// calls returns the EC2 requests the emulator answered so far, by action,
// and the ones it answered with an error, by action and code.
func (e *emulator) calls(t *testing.T) (byAction map[string]int, errors map[string]int) {
	t.Helper()
	byAction, errors = map[string]int{}, map[string]int{}
	scrapeMetrics(t, e.admin, func(line string) {
		m := callsPattern.FindStringSubmatch(line)
		if m == nil {
			return
		}
		n, _ := strconv.ParseFloat(m[3], 64)
		byAction[m[1]] += int(n)
		if m[2] != "Success" {
			errors[m[1]+" "+m[2]] += int(n)
		}
	})
	return byAction, errors
}

// binary is the path of a binary make build wrote.
func binary(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "_output", "bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run make build (make bench does)", p)
	}
	return p
}

// dial connects to a CSI endpoint (unix:///path).
func dial(t *testing.T, endpoint string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+strings.TrimPrefix(endpoint, "unix://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// waitFor polls cond every 50 ms until it holds or the time is up.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sampler records a process's peak memory and its CPU over a run.
type sampler struct {
	mu    sync.Mutex
	first usage
	last  usage
	stop  context.CancelFunc
	done  chan struct{}
}

// sample starts watching p every 100 ms; the returned sampler's end stops it.
func sample(t *testing.T, p *process) *sampler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{first: p.usage(t), stop: cancel, done: make(chan struct{})}
	s.last = s.first
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if u, err := readUsage(p.cmd.Process.Pid); err == nil {
					s.mu.Lock()
					s.last = u
					s.mu.Unlock()
				}
			}
		}
	}()
	return s
}

// end stops sampling and returns the CPU ticks spent since start and the
// peak resident memory.
func (s *sampler) end() usage {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return usage{CPUTicks: s.last.CPUTicks - s.first.CPUTicks, PeakRSSKB: s.last.PeakRSSKB, RSSKB: s.last.RSSKB}
}
