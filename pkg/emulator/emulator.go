// Package emulator assembles the EC2 emulator: the cloud model over a disk
// store (real loop devices or state only), the EC2 Query API, the instance
// metadata service of the local instance, the fault injector and the admin
// listener with metrics. cmd/ec2-emulator runs it as a process;
// emulatortest runs it inside other packages' tests.
package emulator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/admin"
	"github.com/diskplane/diskplane/pkg/emulator/disks"
	"github.com/diskplane/diskplane/pkg/emulator/ec2api"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/guestagent"
	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/imds"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
	"github.com/diskplane/diskplane/pkg/emulator/model"
	"github.com/diskplane/diskplane/pkg/emulator/servicemetrics"
	"github.com/diskplane/diskplane/pkg/emulator/sts"
)

// Config is everything the emulator needs to start.
type Config struct {
	// Cloud describes the region, zones, instances, latencies and data
	// directory. Its Store and fault hooks (StickAttach, FailAsync,
	// StaleWindow, and Now unless set) are set by New.
	Cloud model.Config
	// Devices backs volumes with real loop devices and by-id links (needs
	// root and Cloud.DataDir); false keeps state only.
	Devices bool
	// LinkDir is where by-id links of attached volumes go; empty means
	// /dev/disk/by-id.
	LinkDir string
	// Guest, when set, makes the local instance a virtual machine (hack/vm)
	// instead of this host: attached volumes appear there as NVMe devices,
	// through the VM's guest agent. It needs Devices and Cloud.DataDir.
	Guest *GuestConfig
	// Faults is the initial fault setting.
	Faults faults.Config
	// IMDS tunes the metadata service.
	IMDS imds.Options
	// IAM declares the account's OIDC providers, roles and access keys: who
	// STS issues credentials to and whose signatures KMS accepts.
	IAM iam.Config
	// KMS declares keys of the emulator's KMS.
	KMS kms.Config
}

// GuestConfig connects the emulator to the VM that plays its local instance.
type GuestConfig struct {
	// Agent is the guest agent's address, e.g. http://127.0.0.1:8703.
	Agent string
	// DataDir is where the VM sees Cloud.DataDir (its mount of the folder
	// the host shares with it).
	DataDir string
}

// Emulator is one running emulated cloud with its three HTTP handlers.
type Emulator struct {
	// Cloud is the model; tests may inspect it directly.
	Cloud *model.Cloud
	// Faults is the live fault setting.
	Faults *faults.Faults
	// Metrics counts the EC2 requests.
	Metrics *ec2api.Metrics
	// Registry holds the emulator's metrics (served on the admin listener).
	Registry *prometheus.Registry
	// Store holds the volumes' bytes; emulatortest uses it to remove every
	// loop device and link when a test ends.
	Store disks.Store
	// IAM and Keys are the identities and keys of the emulator's STS and KMS.
	IAM  *iam.Store
	Keys *kms.Store
	// Services counts the STS and KMS requests.
	Services *servicemetrics.Metrics
	// EC2, IMDS and Admin are the handlers of the three listeners. EC2's
	// listener also answers STS and KMS (see apiHandler), so one
	// AWS_ENDPOINT_URL points an SDK at all three.
	EC2, IMDS, Admin http.Handler
}

// New builds the emulator: the disk store, the model (which loads the saved
// state and reconciles the store), and the handlers.
func New(cfg Config) (*Emulator, error) {
	store, err := newStore(cfg)
	if err != nil {
		return nil, err
	}
	f, err := faults.New(cfg.Faults)
	if err != nil {
		return nil, fmt.Errorf("faults: %w", err)
	}
	mc := cfg.Cloud
	mc.Store = store
	mc.StickAttach = f.StickAttach
	mc.FailAsync = f.FailAsync
	mc.StaleWindow = f.StaleWindow
	if mc.Now == nil {
		mc.Now = f.Now
	}
	cloud, err := model.New(mc)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := ec2api.NewMetrics(reg)
	if err != nil {
		_ = cloud.Close()
		return nil, err
	}
	e := &Emulator{Cloud: cloud, Faults: f, Metrics: metrics, Registry: reg, Store: store}
	if err := e.newServices(cfg); err != nil {
		_ = cloud.Close()
		return nil, err
	}
	e.EC2 = apiHandler(ec2api.NewHandler(cloud, ec2api.Options{Faults: f, Metrics: metrics, Keys: e.Keys}),
		sts.NewHandler(e.IAM, e.Services), kms.NewHandler(e.Keys, e.IAM, e.Services))
	e.IMDS = imds.NewHandler(e.callingInstance, cfg.IMDS)
	e.Admin = adminHandler(admin.NewHandler(cloud, f, reg), e.IAM, e.Keys)
	return e, nil
}

// newStore picks the disk store the configuration asks for. An instance
// view exposes loop devices, so it needs the loop store.
func newStore(cfg Config) (disks.Store, error) {
	for _, spec := range cfg.Cloud.Instances {
		if spec.View != nil && (!cfg.Devices || cfg.Guest != nil) {
			return nil, fmt.Errorf("instance %s has a view: that needs the host's loop devices (not --no-devices, not a guest)", spec.ID)
		}
	}
	if !cfg.Devices {
		return disks.NewStateOnlyStore(), nil
	}
	if cfg.Cloud.DataDir == "" {
		return nil, errors.New("real devices need a data directory for the volume images")
	}
	if cfg.Guest != nil {
		agent, err := guestagent.NewClient(cfg.Guest.Agent)
		if err != nil {
			return nil, err
		}
		store, err := disks.NewGuestStore(cfg.Cloud.DataDir, cfg.Guest.DataDir, agent)
		if err != nil {
			return nil, fmt.Errorf("guest disk store: %w", err)
		}
		return store, nil
	}
	store, err := disks.NewLoopStore(cfg.Cloud.DataDir, cfg.LinkDir)
	if err != nil {
		return nil, fmt.Errorf("loop-device disk store: %w", err)
	}
	return store, nil
}

// callingInstance describes to IMDS the instance at the caller's address
// when the host plays it through a view, else the local instance. Before
// any instance exists (never, once New returned) it is empty.
func (e *Emulator) callingInstance(caller string) imds.Instance {
	in, zone, ok := e.Cloud.ViewedInstanceAt(caller)
	if !ok {
		in, zone, ok = e.Cloud.LocalInstance()
	}
	if !ok {
		return imds.Instance{}
	}
	out := imds.Instance{
		ID:                  in.ID,
		Type:                in.Type,
		ImageID:             in.ImageID,
		AccountID:           e.Cloud.AccountID(),
		Region:              e.Cloud.Region(),
		AvailabilityZone:    zone.Name,
		AvailabilityZoneID:  zone.ID,
		PendingTime:         in.LaunchTime,
		BlockDeviceMappings: map[string]string{"ami": in.RootDevice, "root": in.RootDevice},
	}
	for _, n := range in.NetworkInterfaces {
		out.NetworkInterfaces = append(out.NetworkInterfaces, imds.NetworkInterface{
			MAC: n.MAC, ID: n.ID, DeviceNumber: n.DeviceNumber, PrivateIPv4s: n.PrivateIPs, SubnetID: n.SubnetID, VPCID: n.VPCID,
		})
	}
	return out
}

// Close stops the model's background work. The state is already saved.
func (e *Emulator) Close() error { return e.Cloud.Close() }

// Listeners are where Serve answers; a nil listener turns that part off.
type Listeners struct {
	EC2, IMDS, Admin net.Listener
}

// shutdownTimeout bounds how long in-flight requests may take after a stop.
const shutdownTimeout = 10 * time.Second

// Serve answers on the listeners until ctx ends, then shuts the servers down
// gracefully (in-flight requests finish, bounded by a timeout).
func (e *Emulator) Serve(ctx context.Context, l Listeners) error {
	type server struct {
		name string
		srv  *http.Server
		l    net.Listener
	}
	var servers []server
	for _, s := range []struct {
		name string
		h    http.Handler
		l    net.Listener
	}{{"EC2 API", e.EC2, l.EC2}, {"IMDS", e.IMDS, l.IMDS}, {"admin", e.Admin, l.Admin}} {
		if s.l == nil {
			continue
		}
		servers = append(servers, server{name: s.name, l: s.l, srv: &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second}})
	}
	errc := make(chan error, len(servers))
	for _, s := range servers {
		klog.InfoS("Serving", "endpoint", s.name, "address", "http://"+s.l.Addr().String())
		go func() {
			if err := s.srv.Serve(s.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s server: %w", s.name, err)
				return
			}
			errc <- nil
		}()
	}
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	errs := []error{first}
	for _, s := range servers {
		errs = append(errs, s.srv.Shutdown(shutdownCtx))
	}
	remaining := len(servers)
	if first != nil {
		remaining--
	}
	for range remaining {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}
