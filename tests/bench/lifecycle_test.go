//go:build bench

package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/emulator/model"
	"github.com/diskplane/diskplane/pkg/testutil/motoserver"
)

// latencies are the state-change times of a run's emulator: its latency
// profile (docs/emulator.md, "Latency profiles"; fixed when the run names
// none), whose medians and 99th percentiles are the floors of the RPCs
// that wait for them.
func (run lifecycleRun) latencies(t testing.TB) model.Latencies {
	t.Helper()
	l, err := model.LatencyProfile(run.latencyProfile())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// latencyProfile is the run's profile name: moto's changes are instant.
func (run lifecycleRun) latencyProfile() string {
	if run.moto {
		return "instant"
	}
	if run.latency == "" {
		return "fixed"
	}
	return run.latency
}

// tail is the 99th percentile of a transition whose median is m under l
// (m itself where the profile's times do not vary).
func tail(l model.Latencies, m time.Duration, pick func(model.Latencies) time.Duration) time.Duration {
	if l.P99 == nil || pick(*l.P99) < m {
		return m
	}
	return pick(*l.P99)
}

// zone is where the lifecycle runs place volumes and instances.
const zone = "us-east-1a"

// controllerKind is a CSI controller the lifecycle runs drive.
type controllerKind struct {
	name string
	// start runs the controller with env (the SDK variables that point it
	// at the run's EC2) and returns its process and CSI endpoint; Diskplane
	// gets diskplaneFlags too (see backend).
	start func(t *testing.T, dir string, env, diskplaneFlags []string) (*process, string)
}

// diskplaneController is Diskplane's controller as its chart runs it.
var diskplaneController = controllerKind{name: "Diskplane", start: func(t *testing.T, dir string, env, diskplaneFlags []string) (*process, string) {
	endpoint := "unix://" + dir + "/diskplane.sock"
	p := start(t, dir, "diskplane-controller", binary(t, "diskplane"), env,
		append([]string{"--mode=controller", "--endpoint=" + endpoint, "--v=2"}, diskplaneFlags...)...)
	return p, endpoint
}}

// upstreamController is the upstream AWS EBS CSI driver's controller with
// batching on, as its Helm chart ships it.
func upstreamController(bin string) controllerKind {
	return controllerKind{name: "upstream", start: func(t *testing.T, dir string, env, _ []string) (*process, string) {
		endpoint := "unix://" + dir + "/upstream.sock"
		p := start(t, dir, "upstream-controller", bin, env, "controller", "--endpoint="+endpoint, "--batching=true", "--v=2")
		return p, endpoint
	}}
}

// awsEnv points the AWS SDK at the emulator, as a user does.
func awsEnv(e *emulator) []string {
	return []string{"AWS_ENDPOINT_URL_EC2=" + e.ec2, "AWS_EC2_METADATA_SERVICE_ENDPOINT=" + e.imds, "AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=bench", "AWS_SECRET_ACCESS_KEY=bench", "AWS_EC2_METADATA_DISABLED=false"}
}

// lifecycleRun is one profile of volume lifecycles.
type lifecycleRun struct {
	name        string
	lifecycles  int
	concurrency int
	// faults are extra emulator flags (throttling, injected errors).
	faults []string
	// latency is the emulator's latency profile; empty means fixed.
	latency string
	// moto runs the lifecycles against moto_server instead of the emulator
	// (see motoBackend), after warmup lifecycles that are not measured.
	moto   bool
	warmup int
	// lane puts the run beside the runs of the other lanes (0: alone). The
	// runs of one lane go one after another; a block of consecutive runs
	// with lanes goes at once, lane by lane.
	lane int
}

// lifecycleResult is what one run of one controller measured.
type lifecycleResult struct {
	Controller  string `json:"controller"`
	Run         string `json:"run"`
	Lifecycles  int    `json:"lifecycles"`
	Concurrency int    `json:"concurrency"`
	Warmup      int    `json:"warmup,omitempty"`
	// LatencyProfile names the emulator's latencies, Latency gives them.
	LatencyProfile string                     `json:"latencyProfile"`
	Backend        string                     `json:"backend"`
	Latency        model.Latencies            `json:"latency"`
	Latencies      map[string][]time.Duration `json:"latencies"` // RPC -> every call's time to success
	// Changes are, for each call of Latencies (same RPC, same place), the
	// time the emulator gave the change it waited for (see backend.draws):
	// the floor of that one call. Empty when the backend does not say.
	Changes  map[string][]time.Duration `json:"changes,omitempty"`
	Failures map[string]int             `json:"failures"` // RPC -> attempts that failed
	Wall     time.Duration              `json:"wall"`
	Calls    map[string]int             `json:"ec2Calls"`  // action -> calls
	Errors   map[string]int             `json:"ec2Errors"` // action and code -> calls answered with an error
	// Reads are the Describe calls answered, by action and what they
	// selected ("DescribeVolumes filters": lookups by name tag); nil when
	// the backend does not say.
	Reads map[string]int `json:"ec2Reads,omitempty"`
	Usage usage          `json:"controllerUsage"`
}

// The RPCs of one lifecycle, in order.
const (
	rpcCreate    = "CreateVolume"
	rpcPublish   = "ControllerPublishVolume"
	rpcUnpublish = "ControllerUnpublishVolume"
	rpcDelete    = "DeleteVolume"
)

// instances is how many instances the emulator plays: enough that 100
// concurrent attachments stay far below each one's limit.
const instances = 10

// backend is the EC2 a lifecycle run drives.
type backend struct {
	name string
	// env points a controller at it through the SDK's standard variables.
	env []string
	// diskplaneFlags are what Diskplane's controller must be told of this
	// EC2 beyond its chart's flags (moto keeps no ClientToken).
	diskplaneFlags []string
	// nodes are its instances, which the lifecycles attach volumes to.
	nodes []string
	// calls returns the EC2 requests it answered so far, by action, and
	// those it answered with an error, by action and code.
	calls func(t *testing.T) (byAction, errors map[string]int)
	// reads returns the Describe requests it answered so far, by action
	// and selection (nil: it does not say; moto).
	reads func(t *testing.T) map[string]int
	// draws returns the times it gave its state changes (nil: it does not
	// say; moto's are instant).
	draws func(t *testing.T) []model.Draw
}

// emulatorBackend starts a fresh ec2-emulator for a run: state only, the
// run's latency profile, the same draws for every controller.
func emulatorBackend(t *testing.T, dir, name string, run lifecycleRun) backend {
	args := []string{"--no-devices", "--data-dir=", "--zones=" + zone + "=use1-az1", "--modifications-per-day=-1"}
	var nodes []string
	for i := range instances {
		id := fmt.Sprintf("i-%017x", i+1)
		nodes = append(nodes, id)
		spec := "--instance=id=" + id + ",type=m5.large,zone=" + zone
		if i == 0 {
			spec += ",local"
		}
		args = append(args, spec)
	}
	args = append(args, "--latency-profile="+run.latencyProfile(), "--latency-seed=1")
	e := startEmulator(t, dir, "emulator-"+name, append(args, run.faults...)...)
	return backend{name: "ec2-emulator", env: awsEnv(e), nodes: nodes, calls: e.calls, reads: e.reads, draws: e.draws}
}

// runLifecycles starts a fresh backend (see emulatorBackend, motoBackend)
// and the controller, and drives run.lifecycles create → publish →
// unpublish → delete lifecycles through it, run.concurrency at a time,
// retrying a failed call as a sidecar would, after run.warmup lifecycles
// it does not measure.
func runLifecycles(t *testing.T, dir string, kind controllerKind, run lifecycleRun) lifecycleResult {
	t.Helper()
	var b backend
	if run.moto {
		b = motoBackend(t)
	} else {
		b = emulatorBackend(t, dir, kind.name, run)
	}
	ctrl, endpoint := kind.start(t, dir, b.env, b.diskplaneFlags)
	conn := dial(t, endpoint)
	client := csi.NewControllerClient(conn)
	waitFor(t, kind.name+" controller to answer", time.Minute, func() bool {
		_, err := csi.NewIdentityClient(conn).Probe(context.Background(), &csi.ProbeRequest{})
		return err == nil
	})
	drive := func(prefix string, lifecycles int, record recorder) {
		work := make(chan int)
		var wg sync.WaitGroup
		for range run.concurrency {
			wg.Go(func() {
				for i := range work {
					lifecycle(t, client, fmt.Sprintf("%s-%d", prefix, i), b.nodes[i%len(b.nodes)], record)
				}
			})
		}
		for i := range lifecycles {
			work <- i
		}
		close(work)
		wg.Wait()
	}
	drive("warmup-"+run.name, run.warmup, func(string, string, time.Duration, int) {})
	before, errsBefore := b.calls(t)
	var readsBefore map[string]int
	if b.reads != nil {
		readsBefore = b.reads(t)
	}
	cpu := sample(t, ctrl)

	res := lifecycleResult{Controller: kind.name, Run: run.name, Lifecycles: run.lifecycles, Concurrency: run.concurrency, Warmup: run.warmup,
		LatencyProfile: run.latencyProfile(), Backend: b.name, Latency: run.latencies(t),
		Latencies: map[string][]time.Duration{}, Failures: map[string]int{}}
	var mu sync.Mutex
	volumes := map[string][]string{} // RPC -> the volume of each call in res.Latencies
	started := time.Now()
	drive("bench-"+run.name, run.lifecycles, func(rpc, volumeID string, d time.Duration, failures int) {
		mu.Lock()
		defer mu.Unlock()
		res.Latencies[rpc] = append(res.Latencies[rpc], d)
		volumes[rpc] = append(volumes[rpc], volumeID)
		res.Failures[rpc] += failures
	})
	res.Wall = time.Since(started)
	res.Usage = cpu.end()
	if b.draws != nil {
		res.Changes = changesWaitedFor(t, b.draws(t), volumes)
	}
	after, errs := b.calls(t)
	res.Calls, res.Errors = map[string]int{}, map[string]int{}
	for action, n := range after {
		if d := n - before[action]; d > 0 {
			res.Calls[action] = d
		}
	}
	for code, n := range errs {
		if d := n - errsBefore[code]; d > 0 {
			res.Errors[code] = d
		}
	}
	if b.reads != nil {
		res.Reads = map[string]int{}
		for sel, n := range b.reads(t) {
			if d := n - readsBefore[sel]; d > 0 {
				res.Reads[sel] = d
			}
		}
	}
	return res
}

// recorder takes one RPC's time to success, the volume it was for, and its
// attempts that failed.
type recorder func(rpc, volumeID string, took time.Duration, failures int)

// changeOf is the state change each RPC waits for, as model.Draw names it.
var changeOf = map[string]string{rpcCreate: "create", rpcPublish: "attach", rpcUnpublish: "detach"}

// changesWaitedFor returns, for each call of each RPC (volumes: the volume
// of each, in order), the time the backend gave the change the call waited
// for: its volume's draw of changeOf[rpc], the first one (a lifecycle
// creates, attaches and detaches its volume once). A call whose change
// was not drawn fails the test: the figures would compare the wrong
// things.
func changesWaitedFor(t *testing.T, draws []model.Draw, volumes map[string][]string) map[string][]time.Duration {
	t.Helper()
	type key struct{ volume, change string }
	drawn := map[key]time.Duration{}
	for _, d := range draws {
		k := key{d.Resource, d.Change}
		if _, ok := drawn[k]; !ok {
			drawn[k] = d.Takes
		}
	}
	out := map[string][]time.Duration{}
	for rpc, ids := range volumes {
		change, ok := changeOf[rpc]
		if !ok {
			continue
		}
		for _, id := range ids {
			d, ok := drawn[key{id, change}]
			if !ok && id != "" { // "": a create that failed, which the run reported
				t.Fatalf("the emulator drew no %s of %s, which %s waited for", change, id, rpc)
			}
			out[rpc] = append(out[rpc], d)
		}
	}
	return out
}

// lifecycle creates, publishes, unpublishes and deletes one volume.
func lifecycle(t *testing.T, c csi.ControllerClient, name, node string, record recorder) {
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	topology := &csi.Topology{Segments: map[string]string{"topology.kubernetes.io/zone": zone}}
	var vol *csi.Volume
	took, failures := call(t, rpcCreate, func(ctx context.Context) error {
		resp, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
			VolumeCapabilities: []*csi.VolumeCapability{capability}, Parameters: map[string]string{"type": "gp3"},
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{topology}, Preferred: []*csi.Topology{topology}}})
		vol = resp.GetVolume()
		return err
	})
	record(rpcCreate, vol.GetVolumeId(), took, failures)
	took, failures = call(t, rpcPublish, func(ctx context.Context) error {
		_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol.GetVolumeId(), NodeId: node,
			VolumeCapability: capability, VolumeContext: vol.GetVolumeContext()})
		return err
	})
	record(rpcPublish, vol.GetVolumeId(), took, failures)
	took, failures = call(t, rpcUnpublish, func(ctx context.Context) error {
		_, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: vol.GetVolumeId(), NodeId: node})
		return err
	})
	record(rpcUnpublish, vol.GetVolumeId(), took, failures)
	took, failures = call(t, rpcDelete, func(ctx context.Context) error {
		_, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()})
		return err
	})
	record(rpcDelete, vol.GetVolumeId(), took, failures)
}

// call makes one CSI call as a sidecar does: with a deadline per attempt,
// and again after a pause when it fails, until it succeeds (or fails for
// good after 20 attempts). It returns the time from the first attempt to
// the success and the attempts that failed.
func call(t *testing.T, rpc string, do func(context.Context) error) (took time.Duration, failures int) {
	started := time.Now()
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := do(ctx)
		cancel()
		if err == nil {
			return time.Since(started), attempt
		}
		if attempt == 19 || status.Code(err) == codes.InvalidArgument {
			t.Errorf("%s failed %d times, last: %v", rpc, attempt+1, err)
			return time.Since(started), attempt + 1
		}
		time.Sleep(time.Second)
	}
}

// percentile returns the p-th percentile (0 < p ≤ 100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(rank, 1)-1]
}

// perLifecycle is calls per lifecycle.
func (r lifecycleResult) perLifecycle(actions ...string) float64 {
	n := 0
	for a, c := range r.Calls {
		if len(actions) == 0 || slices.Contains(actions, a) {
			n += c
		}
	}
	return float64(n) / float64(r.Lifecycles)
}

// floorWall is the least time the run can take: each worker's lifecycles
// one after another, each waiting for EC2's three state changes (their
// medians, where the times vary).
func (r lifecycleResult) floorWall() time.Duration {
	rounds := (r.Lifecycles + r.Concurrency - 1) / r.Concurrency
	return time.Duration(rounds) * (r.Latency.VolumeCreate + r.Latency.Attach + r.Latency.Detach)
}

// benchLifecycles runs the profile's lifecycle runs (P1, P2): through
// Diskplane's controller, and through the upstream driver's when
// UPSTREAM_EBS_CSI_DRIVER names its binary.
func benchLifecycles(t *testing.T, r *report) {
	// The throttled run is the 500 lifecycles again with EC2's token buckets
	// on: 500 creates in half a minute are more than EC2's default
	// CreateVolume bucket lets through, so its calls per lifecycle against
	// the unthrottled run's show what throttling costs the driver. The
	// faults run adds 5 % 5xx answers at the smaller load, whose retries
	// each cost a call.
	throttled := []string{"--throttle"}
	faults := []string{"--throttle", "--inject-error=*=InternalError:0.05"}
	// The runs of ten (and thirty) at a time spend their time asleep,
	// waiting for the backend's changes (a controller uses well under 1 %
	// of a core), so they go in two lanes at once and the profile takes
	// about half as long; the runs whose controllers work hardest (a
	// hundred at a time) or whose figures are tens of milliseconds
	// (instant, moto) run alone.
	// Lanes and drivers at once are four parallel tests: go test needs
	// -parallel 4 or more (hack/bench/run.sh passes 8), or they queue.
	// The ebs run is long enough that its median draws are a fair measure:
	// the aims are a tenth over this run's changes' median, and the median
	// of 60 lognormal draws of EBS's spread is off the profile's by about
	// a tenth either way, so at 60 even a client that knew the profile
	// could not hold an aim against it reliably. 240 halve that; 30 at a
	// time keep the run about as long as the 60 ten at a time took.
	runs := []lifecycleRun{
		{name: "500x100", lifecycles: 500, concurrency: 100},
		{name: "500x100-throttled", lifecycles: 500, concurrency: 100, faults: throttled},
		{name: "240x30-ebs", lifecycles: 240, concurrency: 30, latency: "ebs", lane: 1},
		{name: "60x10-ebs-faults", lifecycles: 60, concurrency: 10, latency: "ebs", faults: faults, lane: 2},
		{name: "100x10", lifecycles: 100, concurrency: 10, lane: 2},
		{name: "100x10-faults", lifecycles: 100, concurrency: 10, faults: faults, lane: 1},
		{name: "20x10-slow", lifecycles: 20, concurrency: 10, latency: "slow", lane: 2},
		{name: "100x10-instant", lifecycles: 100, concurrency: 10, latency: "instant"},
		{name: "40x5-moto", lifecycles: 40, concurrency: 5, warmup: 20, moto: true},
	}
	if *profile == "ci" {
		runs = []lifecycleRun{
			{name: "30x10", lifecycles: 30, concurrency: 10, lane: 1},
			{name: "30x10-faults", lifecycles: 30, concurrency: 10, faults: faults, lane: 2},
		}
	}
	// -bench.latency runs them all against a backend of another speed.
	if *latency != "" {
		if _, err := model.LatencyProfile(*latency); err != nil {
			t.Fatalf("-bench.latency: %v", err)
		}
		for i := range runs {
			if runs[i].latency == "" && !runs[i].moto {
				runs[i].latency = *latency
				runs[i].name += "-" + *latency
			}
		}
	}
	pick, err := regexp.Compile(*runNames)
	if err != nil {
		t.Fatalf("-bench.runs: %v", err)
	}
	runs = slices.DeleteFunc(runs, func(r lifecycleRun) bool { return !pick.MatchString(r.name) })
	if !motoAvailable() {
		runs = slices.DeleteFunc(runs, func(r lifecycleRun) bool {
			if r.moto {
				t.Logf("NOT RUN: %s needs %s on PATH (pip install 'moto[server]==5.2.1')", r.name, motoserver.Command)
			}
			return r.moto
		})
	}
	kinds := []controllerKind{diskplaneController}
	if bin := os.Getenv(upstreamEnv); bin != "" {
		kinds = append(kinds, upstreamController(bin))
		r.upstream = true
	}
	// byRun[i][k] is what kinds[k] measured in runs[i].
	byRun := make([][]lifecycleResult, len(runs))
	for _, block := range runBlocks(runs) {
		if len(block) == 1 {
			runOne(t, r, kinds, runs[block[0]], byRun, block[0])
			continue
		}
		t.Run(fmt.Sprintf("lanes-%s", runs[block[0]].name), func(t *testing.T) {
			for lane, members := range laneMembers(runs, block) {
				t.Run(fmt.Sprintf("lane%d", lane), func(t *testing.T) {
					t.Parallel()
					for _, i := range members {
						runOne(t, r, kinds, runs[i], byRun, i)
					}
				})
			}
		})
		if t.Failed() {
			t.FailNow()
		}
	}
	var results []lifecycleResult
	for _, byKind := range byRun {
		for k, res := range byKind {
			results = append(results, res)
			rows := lifecycleRows(res)
			if kinds[k].name == diskplaneController.name {
				r.rows = append(r.rows, rows...)
				continue
			}
			for _, x := range rows {
				for i := range r.rows {
					if r.rows[i].Section == x.Section && r.rows[i].Name == x.Name {
						r.rows[i].Upstream = x.Value
					}
				}
			}
		}
	}
	r.raw["lifecycles"] = results
}

// runOne drives run through every controller kind and stores what each
// measured in byRun[i]. The kinds drive it at once, each against a backend
// of its own with the same draws (-bench.apart: one after the other): the
// lifecycles spend their time waiting for the backend's state changes, so
// the run takes as long as the slower of the two rather than their sum.
func runOne(t *testing.T, r *report, kinds []controllerKind, run lifecycleRun, byRun [][]lifecycleResult, i int) {
	byKind := make([]lifecycleResult, len(kinds))
	t.Run(run.name, func(t *testing.T) {
		for k, kind := range kinds {
			t.Run(kind.name, func(t *testing.T) {
				if !*apart {
					t.Parallel()
				}
				dir := filepath.Join(r.dir, run.name, kind.name)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				byKind[k] = runLifecycles(t, dir, kind, run)
			})
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	byRun[i] = byKind
}

// runBlocks splits the runs, by index, into what goes at once: a run
// without a lane alone, consecutive runs with lanes together (each alone
// with -bench.apart, which keeps every run free of another's work).
func runBlocks(runs []lifecycleRun) [][]int {
	var blocks [][]int
	for i, run := range runs {
		n := len(blocks)
		if run.lane != 0 && !*apart && n > 0 && runs[blocks[n-1][0]].lane != 0 {
			blocks[n-1] = append(blocks[n-1], i)
			continue
		}
		blocks = append(blocks, []int{i})
	}
	return blocks
}

// laneMembers groups a block's runs by lane, each lane's runs in order.
func laneMembers(runs []lifecycleRun, block []int) map[int][]int {
	lanes := map[int][]int{}
	for _, i := range block {
		lanes[runs[i].lane] = append(lanes[runs[i].lane], i)
	}
	return lanes
}

// lifecycleRows are the figures of one lifecycle run.
func lifecycleRows(res lifecycleResult) []row {
	section := fmt.Sprintf("P1/P2 %d lifecycles, %d at a time", res.Lifecycles, res.Concurrency)
	switch {
	case strings.Contains(res.Run, "-throttled"):
		section += ", throttled"
	case strings.Contains(res.Run, "-faults"):
		section += ", throttled, 5% 5xx"
	}
	switch {
	case res.Backend == motoBackendName:
		section += fmt.Sprintf(", moto_server (after %d to warm up)", res.Warmup)
	case res.LatencyProfile != "fixed":
		section += ", " + res.LatencyProfile + " latencies"
	}
	var rows []row
	add := func(name string, v, floor float64, unit, note string) {
		rows = append(rows, row{Section: section, Name: name, Value: v, Floor: floor, Unit: unit, Note: note})
	}
	l := res.Latency
	for _, rpc := range []struct {
		name string
		pick func(model.Latencies) time.Duration
	}{
		{rpcCreate, func(l model.Latencies) time.Duration { return l.VolumeCreate }},
		{rpcPublish, func(l model.Latencies) time.Duration { return l.Attach }},
		{rpcUnpublish, func(l model.Latencies) time.Duration { return l.Detach }},
		{rpcDelete, func(model.Latencies) time.Duration { return 0 }},
	} {
		ds := res.Latencies[rpc.name]
		median := rpc.pick(l)
		p50, p99 := median, tail(l, median, rpc.pick)
		changes := res.Changes[rpc.name]
		if len(changes) != len(ds) {
			changes = nil
		}
		if changes != nil {
			// The changes this run drew: with varying times, 60 draws'
			// median is off the profile's by a tenth either way.
			p50, p99 = percentile(changes, 50), percentile(changes, 99)
		}
		add(rpc.name+" p50", percentile(ds, 50).Seconds(), p50.Seconds(), "s", aim(p50, 1.1, 100*time.Millisecond))
		add(rpc.name+" p99", percentile(ds, 99).Seconds(), p99.Seconds(), "s", aim(p99, 1.2, 200*time.Millisecond))
		if changes != nil {
			beyond := make([]time.Duration, len(ds))
			for i := range ds {
				beyond[i] = ds[i] - changes[i]
			}
			add(rpc.name+" beyond its change p50", percentile(beyond, 50).Seconds(), 0, "s", "each call's time less its change's")
			add(rpc.name+" beyond its change p99", percentile(beyond, 99).Seconds(), 0, "s", "")
		}
	}
	wallNote := ""
	if l.P99 != nil {
		wallNote = "floor: the medians' sum; a round waits for its slowest draw"
	}
	add("wall time", res.Wall.Seconds(), res.floorWall().Seconds(), "s", wallNote)
	var byAction []string
	for _, a := range sortedKeys(res.Calls) {
		byAction = append(byAction, fmt.Sprintf("%s %.2f", a, float64(res.Calls[a])/float64(res.Lifecycles)))
	}
	add("EC2 calls per lifecycle", res.perLifecycle(), 4, "", strings.Join(byAction, ", "))
	add("of which DescribeVolumes", res.perLifecycle("DescribeVolumes"), 0, "", "")
	if res.Reads != nil {
		add("of which DescribeVolumes by filter", float64(res.Reads["DescribeVolumes filters"])/float64(res.Lifecycles), 0, "",
			"Diskplane's lookups by name tag before a create, and its listings of the named volumes")
	}
	failed := 0
	for _, n := range res.Failures {
		failed += n
	}
	var ec2Errors []string
	for _, k := range sortedKeys(res.Errors) {
		ec2Errors = append(ec2Errors, fmt.Sprintf("%s %d", k, res.Errors[k]))
	}
	add("RPC attempts that failed", float64(failed), 0, "", "EC2 answered with errors: "+strings.Join(ec2Errors, ", "))
	add("controller CPU", float64(res.Usage.CPUTicks), 0, "ticks", "")
	add("controller peak RSS", float64(res.Usage.PeakRSSKB)/1024, 0, "MiB", "")
	return rows
}

// aim is the note of an RPC's percentile whose floor (the changes'
// percentile) is floor: the aim docs/performance.md ("Backends of other
// speeds") sets for it, floor·factor + slack.
func aim(floor time.Duration, factor float64, slack time.Duration) string {
	return fmt.Sprintf("aim ≤ %.2f s", (time.Duration(factor*float64(floor)) + slack).Seconds())
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
