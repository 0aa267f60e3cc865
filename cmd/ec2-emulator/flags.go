package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator"
	"github.com/diskplane/diskplane/pkg/emulator/disks"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// Default listen addresses: loopback only, so the emulator is never reachable
// from the network unless asked to be.
const (
	defaultListen      = "127.0.0.1:8700"
	defaultIMDSListen  = "127.0.0.1:8701"
	defaultAdminListen = "127.0.0.1:8702"
	defaultDataDir     = "/var/lib/ec2-emulator"
)

// options holds every flag of the server.
type options struct {
	listen, imdsListen, adminListen string
	dataDir, linkDir                string
	noDevices                       bool
	guestAgent, guestDataDir        string
	region, zones, accountID        string
	instances                       instanceFlags
	instancesFile                   string
	latencies                       model.Latencies
	latencyProfile                  string
	latencySeed                     uint64
	modificationsPerDay             int
	quotaStorageTiB                 string
	quotaSnapshots                  int64
	requireIMDSToken                bool
	iamFile, kmsFile                string
	showVersion                     bool

	faultsFile          string
	actionLatency       string
	throttle            bool
	injectErrors        errorRuleFlags
	unauthorized        string
	unsupported         string
	eventualConsistency time.Duration
	stuckAttach         string
	stuckAttachNext     int
	faultSeed           uint64
	commitThenFail      commitFailFlags
	staleReads          string
	asyncFailures       asyncFailureFlags
	unusableKMSKeys     string
	clockSkew           time.Duration
	clientTokenTTL      time.Duration

	// set reports whether a flag was given on the command line (a latency
	// flag changes the profile only then).
	set func(name string) bool
}

func registerFlags(fs *flag.FlagSet) *options {
	o := &options{}
	fs.StringVar(&o.listen, "listen", defaultListen, "host:port of the EC2 Query API (AWS_ENDPOINT_URL_EC2=http://<this>)")
	fs.StringVar(&o.imdsListen, "imds-listen", defaultIMDSListen, "host:port of the local instance's metadata service (AWS_EC2_METADATA_SERVICE_ENDPOINT); empty disables it")
	fs.StringVar(&o.adminListen, "admin-listen", defaultAdminListen, "host:port of the admin API (/metrics, /faults, /volumes …); empty disables it")
	fs.StringVar(&o.dataDir, "data-dir", defaultDataDir, "where the state (state.json) and the volume and snapshot images live; empty (only with --no-devices) keeps everything in memory")
	fs.StringVar(&o.linkDir, "device-link-dir", disks.DefaultLinkDir, "where attached volumes get their by-id link (nvme-Amazon_Elastic_Block_Store_vol…)")
	fs.BoolVar(&o.noDevices, "no-devices", false, "keep state only: no images, no loop devices, no root needed")
	fs.StringVar(&o.guestAgent, "guest-agent", "", "play a VM instance (hack/vm): the address of its guest agent (http://host:port); attached volumes appear in the VM as NVMe devices with EBS's serial numbers instead of loop devices on this host")
	fs.StringVar(&o.guestDataDir, "guest-data-dir", "", "with --guest-agent: where the VM sees --data-dir (its mount of the shared folder)")
	fs.StringVar(&o.region, "region", model.DefaultRegion, "the region to play")
	fs.StringVar(&o.zones, "zones", "", "the region's zones as name=id,… (default: <region>a/b/c with IDs <short>-az1/az2/az4)")
	fs.StringVar(&o.accountID, "account-id", model.DefaultAccountID, "the account that owns every resource")
	fs.Var(&o.instances, "instance", "declare an instance: id=i-…,type=m5.large,zone=us-east-1a,enis=1,local,tag:Key=Value; ip=<its private IPv4, which IMDS answers it at>, links=<its by-id link directory>, devices-cgroup=<its cgroup v1 devices directory> make the host play it as one node of several (repeatable; default: one local m5.large in the first zone)")
	fs.StringVar(&o.instancesFile, "instances-file", "", "JSON file with a list of instances ({\"id\",\"type\",\"zone\",\"networkInterfaces\",\"local\",\"privateIp\",\"view\":{\"linkDir\",\"devicesCgroup\"},\"tags\"}), added to --instance")
	o.set = func(name string) bool {
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
		return given
	}
	fs.StringVar(&o.latencyProfile, "latency-profile", "fixed", "the latencies of state changes to start from: "+
		strings.Join(model.LatencyProfileNames(), ", ")+" (ebs: each change's time lognormal around a median with a long tail); "+
		"the --*-latency flags below replace a profile's time (its median) for one kind of change")
	fs.Uint64Var(&o.latencySeed, "latency-seed", 0, "seed of the draws of varying latencies (the ebs profile; 0: from the clock)")
	d := model.DefaultLatencies()
	fs.DurationVar(&o.latencies.VolumeCreate, "volume-create-latency", d.VolumeCreate, "time a volume stays creating")
	fs.DurationVar(&o.latencies.VolumeDelete, "volume-delete-latency", d.VolumeDelete, "time a volume stays deleting")
	fs.DurationVar(&o.latencies.Attach, "attach-latency", d.Attach, "time an attachment stays attaching")
	fs.DurationVar(&o.latencies.Detach, "detach-latency", d.Detach, "time an attachment stays detaching (a busy device: until it is free)")
	fs.DurationVar(&o.latencies.Snapshot, "snapshot-latency", d.Snapshot, "time a snapshot stays pending")
	fs.DurationVar(&o.latencies.Modify, "modify-latency", d.Modify, "time a modification stays modifying")
	fs.DurationVar(&o.latencies.Optimize, "optimize-latency", d.Optimize, "time a modification stays optimizing")
	fs.DurationVar(&o.latencies.InstanceStop, "instance-stop-latency", d.InstanceStop, "time an instance stays stopping or shutting-down")
	fs.DurationVar(&o.latencies.InstanceStart, "instance-start-latency", d.InstanceStart, "time an instance stays pending")
	fs.IntVar(&o.modificationsPerDay, "modifications-per-day", model.DefaultModificationsPerDay, "modifications a volume may start in a rolling 24 hours; negative means no limit")
	fs.StringVar(&o.quotaStorageTiB, "quota-storage-tib", "", "storage quotas in TiB per volume type, type=TiB,… (e.g. gp3=1,io2=2; negative means no limit); types left out keep EC2's defaults of 50 TiB (io2: 20 TiB). Over it CreateVolume, CopyVolumes and a growing ModifyVolume answer VolumeLimitExceeded")
	fs.Int64Var(&o.quotaSnapshots, "quota-snapshots", model.DefaultSnapshotQuota, "snapshots the region may hold; over it CreateSnapshot answers SnapshotLimitExceeded; negative means no limit")
	fs.BoolVar(&o.requireIMDSToken, "require-imds-token", false, "answer IMDSv1 requests (without a session token) with 401, like HttpTokens=required")
	fs.StringVar(&o.iamFile, "iam-file", "", "JSON file declaring the OIDC providers, roles (with trust and identity-based policies) and access keys of the emulated account: who STS issues credentials to, whose signatures KMS accepts and what they may do where a key policy names only the account (docs/emulator.md); PUT /iam changes it at run time")
	fs.StringVar(&o.kmsFile, "kms-file", "", "JSON file declaring KMS keys ({\"keys\":[{\"id\",\"aliases\",\"policy\",\"enabled\"}]}); PUT /kms/keys/<id> declares more at run time")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")

	fs.StringVar(&o.faultsFile, "faults-file", "", "JSON fault setting to start with (the document GET /faults returns); the fault flags below apply on top")
	fs.StringVar(&o.actionLatency, "action-latency", "", "added latency per action: Action=duration,… (Action * for all)")
	fs.BoolVar(&o.throttle, "throttle", false, "throttle like EC2: a token bucket per action (size/refill per second: mutating 200/5, describe 100/20, unfiltered describe 50/10) answering RequestLimitExceeded")
	fs.Var(&o.injectErrors, "inject-error", "inject an error: Action=InternalError|Unavailable:probability[:count] (repeatable; Action * for all)")
	fs.StringVar(&o.unauthorized, "unauthorized", "", "actions that answer UnauthorizedOperation, comma-separated (* for all)")
	fs.StringVar(&o.unsupported, "unsupported", "", "actions that answer InvalidAction, as on an EC2-API cloud without them (e.g. DescribeVolumeStatus,CopyVolumes), comma-separated")
	fs.DurationVar(&o.eventualConsistency, "eventual-consistency", 0, "hide new volumes and snapshots from Describe* calls for this long")
	fs.StringVar(&o.stuckAttach, "stuck-attach", "", "volume IDs whose attachments stay attaching, comma-separated")
	fs.IntVar(&o.stuckAttachNext, "stuck-attach-next", 0, "the next N attachments stay attaching")
	fs.Uint64Var(&o.faultSeed, "fault-seed", 0, "seed of the random draws of error injection (0: from the clock)")
	fs.Var(&o.commitThenFail, "commit-then-fail", "apply requests, then fail them: Action=InternalError|Unavailable|Reset|Stall:probability[:count] (repeatable; Action * for every mutating action)")
	fs.StringVar(&o.staleReads, "stale-reads", "", "Describe* calls answer from the recent past: maxLag[:probability] (e.g. 2s:0.5; probability 1 when left out)")
	fs.Var(&o.asyncFailures, "async-failure", "new resources fail after the request succeeded: Action:probability[:count] with Action CreateVolume, CopyVolumes, CreateSnapshot or * (repeatable)")
	fs.StringVar(&o.unusableKMSKeys, "unusable-kms-keys", "", "KMS key IDs whose volumes go creating → error and disappear, comma-separated")
	fs.DurationVar(&o.clockSkew, "clock-skew", 0, "run the cloud's clock ahead of (positive) or behind (negative) the host's by this much")
	fs.DurationVar(&o.clientTokenTTL, "client-token-ttl", model.DefaultClientTokenTTL, "how long a ClientToken of CreateVolume or CopyVolumes is remembered")
	return o
}

// latencyConfig is the profile's latencies with the latency flags given
// on the command line in place of its medians.
func (o *options) latencyConfig() (model.Latencies, error) {
	l, err := model.LatencyProfile(o.latencyProfile)
	if err != nil {
		return l, fmt.Errorf("--latency-profile: %w", err)
	}
	for name, field := range map[string][2]*time.Duration{
		"volume-create-latency":  {&l.VolumeCreate, &o.latencies.VolumeCreate},
		"volume-delete-latency":  {&l.VolumeDelete, &o.latencies.VolumeDelete},
		"attach-latency":         {&l.Attach, &o.latencies.Attach},
		"detach-latency":         {&l.Detach, &o.latencies.Detach},
		"snapshot-latency":       {&l.Snapshot, &o.latencies.Snapshot},
		"modify-latency":         {&l.Modify, &o.latencies.Modify},
		"optimize-latency":       {&l.Optimize, &o.latencies.Optimize},
		"instance-stop-latency":  {&l.InstanceStop, &o.latencies.InstanceStop},
		"instance-start-latency": {&l.InstanceStart, &o.latencies.InstanceStart},
	} {
		if o.set(name) {
			*field[0] = *field[1]
		}
	}
	return l, nil
}

// config turns the flags into the emulator's configuration.
func (o *options) config() (emulator.Config, error) {
	latencies, err := o.latencyConfig()
	if err != nil {
		return emulator.Config{}, err
	}
	cfg := emulator.Config{
		Cloud: model.Config{
			Region:              o.region,
			AccountID:           o.accountID,
			Instances:           o.instances.specs,
			DataDir:             o.dataDir,
			Latencies:           latencies,
			LatencySeed:         o.latencySeed,
			ModificationsPerDay: o.modificationsPerDay,
			ClientTokenTTL:      o.clientTokenTTL,
		},
		Devices: !o.noDevices,
		LinkDir: o.linkDir,
	}
	switch {
	case o.guestAgent != "" && (o.noDevices || o.guestDataDir == ""):
		return cfg, errors.New("--guest-agent needs --guest-data-dir and real devices (not --no-devices)")
	case o.guestAgent == "" && o.guestDataDir != "":
		return cfg, errors.New("--guest-data-dir goes with --guest-agent")
	case o.guestAgent != "":
		cfg.Guest = &emulator.GuestConfig{Agent: o.guestAgent, DataDir: o.guestDataDir}
	}
	cfg.IMDS.RequireToken = o.requireIMDSToken
	storage, err := parseStorageQuotas(o.quotaStorageTiB)
	if err != nil {
		return cfg, fmt.Errorf("--quota-storage-tib: %w", err)
	}
	if o.quotaSnapshots == 0 {
		return cfg, errors.New("--quota-snapshots: 0 would refuse every snapshot; give a positive number, or a negative one for no limit")
	}
	cfg.Cloud.Quotas = model.Quotas{StorageTiB: storage, Snapshots: o.quotaSnapshots}
	if o.zones != "" {
		zones, err := model.ParseZones(o.zones)
		if err != nil {
			return cfg, fmt.Errorf("--zones: %w", err)
		}
		cfg.Cloud.Zones = zones
	}
	if o.instancesFile != "" {
		b, err := os.ReadFile(o.instancesFile)
		if err != nil {
			return cfg, fmt.Errorf("--instances-file: %w", err)
		}
		var specs []model.InstanceSpec
		if err := json.Unmarshal(b, &specs); err != nil {
			return cfg, fmt.Errorf("--instances-file %s: %w", o.instancesFile, err)
		}
		cfg.Cloud.Instances = append(cfg.Cloud.Instances, specs...)
	}
	f, err := o.faultConfig()
	if err != nil {
		return cfg, err
	}
	cfg.Faults = f
	if err := readJSONFile("--iam-file", o.iamFile, &cfg.IAM); err != nil {
		return cfg, err
	}
	if err := readJSONFile("--kms-file", o.kmsFile, &cfg.KMS); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// readJSONFile reads the JSON document of a file flag into v; an empty
// path reads nothing.
func readJSONFile(flagName, path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flagName, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s %s: %w", flagName, path, err)
	}
	return nil
}

// faultConfig builds the initial fault setting from --faults-file and the
// fault flags.
func (o *options) faultConfig() (faults.Config, error) {
	var c faults.Config
	if o.faultsFile != "" {
		b, err := os.ReadFile(o.faultsFile)
		if err != nil {
			return c, fmt.Errorf("--faults-file: %w", err)
		}
		if err := json.Unmarshal(b, &c); err != nil {
			return c, fmt.Errorf("--faults-file %s: %w", o.faultsFile, err)
		}
	}
	if o.actionLatency != "" {
		if c.Latency == nil {
			c.Latency = map[string]faults.Duration{}
		}
		for _, item := range splitList(o.actionLatency) {
			action, dur, ok := strings.Cut(item, "=")
			d, err := time.ParseDuration(dur)
			if !ok || action == "" || err != nil {
				return c, fmt.Errorf("--action-latency %q: want Action=duration", item)
			}
			c.Latency[action] = faults.Duration(d)
		}
	}
	if o.throttle {
		c.Throttle = faults.EC2Throttle()
	}
	c.Errors = append(c.Errors, o.injectErrors.rules...)
	c.Unauthorized = append(c.Unauthorized, splitList(o.unauthorized)...)
	c.Unsupported = append(c.Unsupported, splitList(o.unsupported)...)
	if o.eventualConsistency != 0 {
		c.EventualConsistency = faults.Duration(o.eventualConsistency)
	}
	c.StuckAttach.VolumeIDs = append(c.StuckAttach.VolumeIDs, splitList(o.stuckAttach)...)
	if o.stuckAttachNext != 0 {
		c.StuckAttach.Next = o.stuckAttachNext
	}
	if o.faultSeed != 0 {
		c.Seed = o.faultSeed
	}
	c.CommitThenFail = append(c.CommitThenFail, o.commitThenFail.rules...)
	c.AsyncFailures = append(c.AsyncFailures, o.asyncFailures.rules...)
	c.UnusableKMSKeys = append(c.UnusableKMSKeys, splitList(o.unusableKMSKeys)...)
	if o.clockSkew != 0 {
		c.ClockSkew = faults.Duration(o.clockSkew)
	}
	if o.staleReads != "" {
		lag, p, hasP := strings.Cut(o.staleReads, ":")
		d, err := time.ParseDuration(lag)
		prob := 1.0
		if hasP {
			prob, err = parseProbability(p, err)
		}
		if err != nil || d <= 0 {
			return c, fmt.Errorf("--stale-reads %q: want maxLag[:probability], e.g. 2s:0.5", o.staleReads)
		}
		c.StaleReads = faults.StaleReads{MaxLag: faults.Duration(d), Probability: prob}
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("faults: %w", err)
	}
	return c, nil
}

// parseStorageQuotas parses type=TiB,… into storage quotas per volume type.
func parseStorageQuotas(s string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, item := range splitList(s) {
		typ, val, ok := strings.Cut(item, "=")
		tib, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("%q: want type=TiB", item)
		}
		typ = strings.TrimSpace(typ)
		if !slices.Contains(model.VolumeTypes(), typ) {
			return nil, fmt.Errorf("%q: unknown volume type (known: %s)", item, strings.Join(model.VolumeTypes(), ", "))
		}
		out[typ] = tib
	}
	return out, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// instanceFlags collects --instance values.
type instanceFlags struct {
	specs []model.InstanceSpec
}

func (f *instanceFlags) String() string {
	var parts []string
	for _, s := range f.specs {
		parts = append(parts, fmt.Sprintf("%+v", s))
	}
	return strings.Join(parts, "; ")
}

// Set parses one instance: comma-separated key=value items (id, type, zone,
// enis, ip, links, devices-cgroup, tag:<key>) and the bare word "local".
// links (and devices-cgroup) give the instance a view: the host plays it
// too, as a node of a multi-node local cluster.
func (f *instanceFlags) Set(v string) error {
	var spec model.InstanceSpec
	for _, item := range splitList(v) {
		key, val, hasVal := strings.Cut(item, "=")
		switch {
		case key == "local" && !hasVal:
			spec.Local = true
		case key == "id" && hasVal:
			spec.ID = val
		case key == "type" && hasVal:
			spec.Type = val
		case key == "zone" && hasVal:
			spec.Zone = val
		case key == "ip" && hasVal:
			spec.PrivateIP = val
		case key == "links" && hasVal:
			spec.View = cmp.Or(spec.View, &disks.View{})
			spec.View.LinkDir = val
		case key == "devices-cgroup" && hasVal:
			spec.View = cmp.Or(spec.View, &disks.View{})
			spec.View.DevicesCgroup = val
		case key == "enis" && hasVal:
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 {
				return fmt.Errorf("enis=%s: want a positive number", val)
			}
			spec.NetworkInterfaces = n
		case strings.HasPrefix(key, "tag:") && hasVal:
			if spec.Tags == nil {
				spec.Tags = map[string]string{}
			}
			spec.Tags[strings.TrimPrefix(key, "tag:")] = val
		default:
			return fmt.Errorf("%q: want id=, type=, zone=, enis=, ip=, links=, devices-cgroup=, tag:<key>= or local", item)
		}
	}
	f.specs = append(f.specs, spec)
	return nil
}

// parseProbability parses a probability unless an earlier parse failed.
func parseProbability(s string, earlier error) (float64, error) {
	if earlier != nil {
		return 0, earlier
	}
	return strconv.ParseFloat(s, 64)
}

// parseRate parses probability[:count] of a rule flag.
func parseRate(v string, parts []string) (float64, int, error) {
	p, err := strconv.ParseFloat(parts[0], 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%q: probability: %w", v, err)
	}
	count := 0
	if len(parts) == 2 {
		if count, err = strconv.Atoi(parts[1]); err != nil {
			return 0, 0, fmt.Errorf("%q: count: %w", v, err)
		}
	}
	return p, count, nil
}

// commitFailFlags collects --commit-then-fail values.
type commitFailFlags struct {
	rules []faults.CommitFailRule
}

func (f *commitFailFlags) String() string { return fmt.Sprint(f.rules) }

// Set parses Action=Mode:probability[:count].
func (f *commitFailFlags) Set(v string) error {
	action, rest, ok := strings.Cut(v, "=")
	parts := strings.Split(rest, ":")
	if !ok || action == "" || len(parts) < 2 || len(parts) > 3 {
		return fmt.Errorf("%q: want Action=InternalError|Unavailable|Reset|Stall:probability[:count]", v)
	}
	p, count, err := parseRate(v, parts[1:])
	if err != nil {
		return err
	}
	f.rules = append(f.rules, faults.CommitFailRule{Action: action, Mode: parts[0], Probability: p, Count: count})
	return nil
}

// asyncFailureFlags collects --async-failure values.
type asyncFailureFlags struct {
	rules []faults.AsyncFailureRule
}

func (f *asyncFailureFlags) String() string { return fmt.Sprint(f.rules) }

// Set parses Action:probability[:count].
func (f *asyncFailureFlags) Set(v string) error {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return fmt.Errorf("%q: want Action:probability[:count]", v)
	}
	p, count, err := parseRate(v, parts[1:])
	if err != nil {
		return err
	}
	f.rules = append(f.rules, faults.AsyncFailureRule{Action: parts[0], Probability: p, Count: count})
	return nil
}

// errorRuleFlags collects --inject-error values.
type errorRuleFlags struct {
	rules []faults.ErrorRule
}

func (f *errorRuleFlags) String() string { return fmt.Sprint(f.rules) }

// Set parses Action=Code:probability[:count].
func (f *errorRuleFlags) Set(v string) error {
	action, rest, ok := strings.Cut(v, "=")
	parts := strings.Split(rest, ":")
	if !ok || action == "" || len(parts) < 2 || len(parts) > 3 {
		return fmt.Errorf("%q: want Action=InternalError|Unavailable:probability[:count]", v)
	}
	p, count, err := parseRate(v, parts[1:])
	if err != nil {
		return err
	}
	f.rules = append(f.rules, faults.ErrorRule{Action: action, Code: parts[0], Probability: p, Count: count})
	return nil
}
