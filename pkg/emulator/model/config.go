package model

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
)

// Latencies are how long each asynchronous state change of the emulated
// cloud takes. Zero makes a change complete at the first look after the
// request (the response itself still shows the transitional state, as EC2's
// does); tests use zero, demos use EC2-like seconds.
type Latencies struct {
	// VolumeCreate is creating → available.
	VolumeCreate time.Duration `json:"volumeCreate"`
	// VolumeDelete is deleting → gone.
	VolumeDelete time.Duration `json:"volumeDelete"`
	// Attach is attaching → attached.
	Attach time.Duration `json:"attach"`
	// Detach is detaching → detached (a busy device waits longer).
	Detach time.Duration `json:"detach"`
	// Snapshot is pending → completed; progress grows evenly meanwhile.
	Snapshot time.Duration `json:"snapshot"`
	// Modify is modifying → optimizing; the new size shows from optimizing on.
	Modify time.Duration `json:"modify"`
	// Optimize is optimizing → completed.
	Optimize time.Duration `json:"optimize"`
	// InstanceStop is an instance's stopping → stopped and shutting-down →
	// terminated: its guest shutting down.
	InstanceStop time.Duration `json:"instanceStop"`
	// InstanceStart is an instance's pending → running.
	InstanceStart time.Duration `json:"instanceStart"`
	// P99, when set, makes each change's time vary as EC2's does: the
	// fields above are then medians, and a change whose P99 field is above
	// its median takes a lognormal time with that 99th percentile
	// (latency.go). P99's own P99 is ignored.
	P99 *Latencies `json:"p99,omitempty"`
}

// DefaultLatencies are EC2-like durations for interactive use: long enough
// that a client's waiting and polling shows, short enough for a demo.
func DefaultLatencies() Latencies {
	return Latencies{
		VolumeCreate:  2 * time.Second,
		VolumeDelete:  2 * time.Second,
		Attach:        2 * time.Second,
		Detach:        2 * time.Second,
		Snapshot:      5 * time.Second,
		Modify:        3 * time.Second,
		Optimize:      5 * time.Second,
		InstanceStop:  3 * time.Second,
		InstanceStart: 3 * time.Second,
	}
}

// InstanceSpec declares one instance of the emulated cloud.
type InstanceSpec struct {
	// ID is the instance ID; empty means a new random one (kept across
	// restarts through the saved state when the spec is the local instance).
	ID string `json:"id,omitempty"`
	// Type is a catalogue instance type; empty means DefaultInstanceType.
	Type string `json:"type,omitempty"`
	// Zone is the zone name; empty means the first zone.
	Zone string `json:"zone,omitempty"`
	// NetworkInterfaces is the number of ENIs; 0 means 1.
	NetworkInterfaces int `json:"networkInterfaces,omitempty"`
	// Local marks the instance this host plays. At most one instance is
	// local; when none is marked and no instance has a View, the first one is.
	Local bool `json:"local,omitempty"`
	// PrivateIP is the primary private IPv4 address of the instance's first
	// network interface; empty means a random one. IMDS answers a request
	// from this address with this instance, as EC2's answers the instance
	// that asks: the nodes of a multi-node local cluster set their own.
	PrivateIP string `json:"privateIp,omitempty"`
	// View, when set, makes the host play this instance too, beside or
	// instead of the local one: its volumes get real devices that only this
	// instance's link directory and devices cgroup expose. It cannot be set
	// on the local instance, which sees the store's own link directory.
	View *disks.View `json:"view,omitempty"`
	// Tags are the instance's tags.
	Tags map[string]string `json:"tags,omitempty"`
}

// DefaultInstanceType is the type of instances declared without one.
const DefaultInstanceType = "m5.large"

// DefaultAccountID is the account the emulated resources belong to.
const DefaultAccountID = "123456789012"

// DefaultModificationsPerDay is EC2's per-volume modification budget: four
// modifications in any rolling 24 hours.
const DefaultModificationsPerDay = 4

// Config describes the emulated cloud.
type Config struct {
	// Region is the region name; empty means DefaultRegion.
	Region string
	// Zones are the region's zones; empty means DefaultZones(Region).
	Zones []Zone
	// AccountID owns every resource; empty means DefaultAccountID.
	AccountID string
	// Instances are the instances to declare; empty means one instance of the
	// default type in the first zone, which is the local instance. Instances
	// already in the saved state are kept.
	Instances []InstanceSpec
	// Store holds the volumes' bytes. Required.
	Store disks.Store
	// DataDir is where the state is saved after every change and loaded from
	// at start; empty keeps the state in memory only. A store that keeps
	// files must keep them here: at start the saved state decides which of
	// its images are a crash's leftovers, and the store removes none unless
	// its images live in this directory.
	DataDir string
	// Latencies are the durations of the asynchronous state changes.
	Latencies Latencies
	// LatencySeed makes the draws of varying latencies (Latencies.P99)
	// reproducible; 0 seeds from the clock.
	LatencySeed uint64
	// ModificationsPerDay is the per-volume modification budget in a rolling
	// 24 hours; 0 means DefaultModificationsPerDay, negative means no limit.
	ModificationsPerDay int
	// Quotas are the account's storage and snapshot quotas at start; what
	// it leaves out gets EC2's default. Cloud.SetQuotas changes them later.
	Quotas Quotas
	// StickAttach, when set, is asked at every AttachVolume whether the new
	// attachment should stay in "attaching" (the stuck-attach fault).
	StickAttach func(volumeID string) bool
	// FailAsync, when set, is asked for every volume or snapshot a request
	// makes whether it should fail later (the asynchronous-failure fault):
	// the action, and the volume's KMS key ("" for a snapshot).
	FailAsync func(action, kmsKeyID string) bool
	// StaleWindow, when set, says how far back a stale read may reach (the
	// stale-reads fault): the cloud keeps its past states that long.
	StaleWindow func() time.Duration
	// ClientTokenTTL is how long a ClientToken is remembered; 0 means
	// DefaultClientTokenTTL.
	ClientTokenTTL time.Duration
	// Now is the clock; nil means time.Now. Tests set it to step time; the
	// emulator sets it to the clock-skew fault's clock.
	Now func() time.Time
}

// DefaultClientTokenTTL is how long the emulated cloud remembers a
// ClientToken. EC2 documents no lifetime for the tokens of CreateVolume and
// CopyVolumes; it keeps them at least for hours. A day keeps every retry a
// client makes within the same token, and lets a test see a token expire.
const DefaultClientTokenTTL = 24 * time.Hour

// withDefaults fills in the defaults and validates the configuration.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Store == nil {
		return cfg, errors.New("model: a disk store is required")
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if len(cfg.Zones) == 0 {
		cfg.Zones = DefaultZones(cfg.Region)
	}
	if cfg.AccountID == "" {
		cfg.AccountID = DefaultAccountID
	}
	if cfg.ModificationsPerDay == 0 {
		cfg.ModificationsPerDay = DefaultModificationsPerDay
	}
	if cfg.ClientTokenTTL < 0 {
		return cfg, errors.New("model: the client token lifetime is negative")
	}
	if cfg.ClientTokenTTL == 0 {
		cfg.ClientTokenTTL = DefaultClientTokenTTL
	}
	quotas, err := cfg.Quotas.withDefaults()
	if err != nil {
		return cfg, fmt.Errorf("quotas: %w", err)
	}
	cfg.Quotas = quotas
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Instances = slices.Clone(cfg.Instances)
	locals, viewed, ips := 0, 0, map[string]bool{}
	for i, spec := range cfg.Instances {
		if spec.Type == "" {
			cfg.Instances[i].Type = DefaultInstanceType
		} else if _, ok := LookupInstanceType(spec.Type); !ok {
			return cfg, fmt.Errorf("instance %d: unknown instance type %q (known: %v)", i, spec.Type, InstanceTypeNames())
		}
		if spec.Zone == "" {
			cfg.Instances[i].Zone = cfg.Zones[0].Name
		} else if _, ok := findZone(cfg.Zones, spec.Zone); !ok {
			return cfg, fmt.Errorf("instance %d: zone %q is not one of the region's zones", i, spec.Zone)
		}
		if spec.ID != "" && !ValidInstanceID(spec.ID) {
			return cfg, fmt.Errorf("instance %d: %q is not an instance ID (i- and 8 or 17 hex digits)", i, spec.ID)
		}
		if spec.NetworkInterfaces < 0 {
			return cfg, fmt.Errorf("instance %d: negative number of network interfaces", i)
		}
		if spec.Local {
			locals++
		}
		if err := validateHosting(spec, ips); err != nil {
			return cfg, fmt.Errorf("instance %d: %w", i, err)
		}
		if spec.View != nil {
			viewed++
		}
	}
	if locals > 1 {
		return cfg, errors.New("more than one instance is marked local")
	}
	if locals == 0 && viewed == 0 && len(cfg.Instances) > 0 {
		cfg.Instances[0].Local = true
	}
	return cfg, nil
}

// validateHosting checks what makes the host play an instance: a valid,
// unique private address, and a usable view that the local instance lacks.
func validateHosting(spec InstanceSpec, ips map[string]bool) error {
	if spec.PrivateIP != "" {
		ip, err := netip.ParseAddr(spec.PrivateIP)
		if err != nil || !ip.Is4() {
			return fmt.Errorf("private IP %q is not an IPv4 address", spec.PrivateIP)
		}
		if ips[spec.PrivateIP] {
			return fmt.Errorf("private IP %s is declared twice", spec.PrivateIP)
		}
		ips[spec.PrivateIP] = true
	}
	if spec.View == nil {
		return nil
	}
	if spec.Local {
		return errors.New("the local instance cannot have a view: it sees the disk store's link directory")
	}
	return spec.View.Validate()
}

// findZone looks a zone up by name.
func findZone(zones []Zone, name string) (Zone, bool) {
	for _, z := range zones {
		if z.Name == name {
			return z, true
		}
	}
	return Zone{}, false
}
