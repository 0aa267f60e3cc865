package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/cloud/metadata"
	"github.com/diskplane/diskplane/pkg/driver"
	"github.com/diskplane/diskplane/pkg/driver/node"
	"github.com/diskplane/diskplane/pkg/kubeclient"
	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/pkg/podevents"
	"github.com/diskplane/diskplane/pkg/registration"
	"github.com/diskplane/diskplane/pkg/startuptaint"
	"github.com/diskplane/diskplane/pkg/tokenplace"
)

// nodeFlags are the flags that only the node service reads.
type nodeFlags struct {
	volumeAttachLimit         int
	reservedVolumeAttachments int
	metadataSources           string
	kubeletRegistrationPath   string
	pluginRegistrationDir     string
	deviceLinkDir             string
	emulatorLoopDevices       bool
	luksPBKDFMemoryKiB        int
	luksPBKDFTime             time.Duration
	luksPBKDFIterations       int
	luksMaxPBKDFMemoryKiB     int
	windowsHostProcess        bool
	windowsStateDir           string
	csiProxyWait              time.Duration
	tokenAudience             string
	tokenPlace                string
}

// Values of --workload-identity-tokens.
const (
	tokensFromCSIDriver     = "csidriver"
	tokensInVolumeContext   = "volume-context"
	tokensInRequestsSecrets = "secrets"
)

func (f *nodeFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.volumeAttachLimit, "volume-attach-limit", -1,
		"the most volumes the driver may attach to this node; -1 computes it from the instance type less what the instance already uses")
	fs.IntVar(&f.reservedVolumeAttachments, "reserved-volume-attachments", -1,
		"attachment slots taken by volumes the driver does not manage, root volume included; -1 counts them from the instance's block device mappings. Not with --volume-attach-limit")
	fs.StringVar(&f.metadataSources, "metadata-sources", strings.Join(metadata.DefaultSources, ","),
		"where the node learns its instance ID, type and zone, tried in order: imds, kubernetes")
	fs.StringVar(&f.kubeletRegistrationPath, "kubelet-registration-path", "",
		"host path of this plugin's CSI socket as the kubelet dials it (e.g. /var/lib/kubelet/plugins/ebs.csi.diskplane.io/csi.sock); "+
			"setting it makes the plugin register itself with the kubelet; leave it empty when node-driver-registrar runs beside the plugin")
	fs.StringVar(&f.pluginRegistrationDir, "plugin-registration-dir", registration.DefaultDir,
		"the kubelet's plugin registration directory, where the registration socket goes")
	fs.StringVar(&f.deviceLinkDir, "device-link-dir", mounter.DefaultDeviceLinkDir,
		"where the by-id links of NVMe devices are (Linux)")
	fs.IntVar(&f.luksPBKDFMemoryKiB, "luks-pbkdf-memory", mounter.DefaultLUKSPBKDFMemoryKiB,
		"memory cost in KiB of Argon2id in the LUKS2 headers the node writes (nodeEncryption: luks2): every open of the volume takes this much, on any node")
	fs.DurationVar(&f.luksPBKDFTime, "luks-pbkdf-time", mounter.DefaultLUKSPBKDFTime,
		"how long the key derivation of a new LUKS2 header is tuned to take on the node that formats it (cryptsetup --iter-time)")
	fs.IntVar(&f.luksPBKDFIterations, "luks-pbkdf-iterations", 0,
		"Argon2id's time cost (passes) in the LUKS2 headers the node writes, the same on every node; 0 tunes it on the formatting node to take --luks-pbkdf-time")
	fs.IntVar(&f.luksMaxPBKDFMemoryKiB, "luks-max-pbkdf-memory", mounter.DefaultLUKSMaxPBKDFMemoryKiB,
		"the most memory in KiB an Argon2 key slot of any LUKS header may take for the node to open it; a header beyond it (written elsewhere) is refused "+
			"before cryptsetup could exceed the plugin's memory limit: raise both together. At least --luks-pbkdf-memory")
	fs.BoolVar(&f.emulatorLoopDevices, "emulator-loop-devices", false,
		"test-only: accept a loop device backed by <volume ID>.img as that volume, as the EC2 emulator attaches volumes to the host it plays; "+
			"never on a real cloud, where a loop device proves nothing about which volume it is")
	fs.StringVar(&f.tokenAudience, "workload-identity-audience", node.DefaultTokenAudience,
		"audience of the pod's service-account token the node exchanges at STS to unlock a volume whose key KMS wraps (nodeEncryptionKeySource: kms); the CSIDriver's tokenRequests must ask for it")
	fs.StringVar(&f.tokenPlace, "workload-identity-tokens", tokensFromCSIDriver,
		"where the kubelet puts the pods' service-account tokens, the only place the node takes them from: csidriver (as the driver's CSIDriver object's "+
			"serviceAccountTokenInSecrets says, read through the Kubernetes API), volume-context or secrets (for a node that cannot read it)")
	fs.BoolVar(&f.windowsHostProcess, "windows-host-process", false,
		"Windows nodes in a HostProcess pod: do csi-proxy's disk, volume and filesystem operations in this process with its v2 library, instead of asking the csi-proxy service over its named pipes")
	fs.StringVar(&f.windowsStateDir, "windows-state-dir", "",
		`Windows nodes: a host directory of the plugin's own below the kubelet's, where csi-proxy may write, for the records of disk work an interruption must not strand (a partition made and not yet formatted); empty means C:\var\lib\kubelet\plugins\<driver-name>`)
	fs.DurationVar(&f.csiProxyWait, "csi-proxy-wait", 30*time.Second,
		"Windows nodes: how long the plugin waits at start for csi-proxy to serve the API groups it needs before it gives up")
}

func (f *nodeFlags) validate() error {
	if f.volumeAttachLimit == 0 || f.volumeAttachLimit < -1 {
		return fmt.Errorf("--volume-attach-limit=%d: want 1 or more, or -1 to compute it", f.volumeAttachLimit)
	}
	if f.reservedVolumeAttachments < -1 {
		return fmt.Errorf("--reserved-volume-attachments=%d: want 0 or more, or -1 to count them", f.reservedVolumeAttachments)
	}
	if f.volumeAttachLimit > 0 && f.reservedVolumeAttachments >= 0 {
		return errors.New("--volume-attach-limit and --reserved-volume-attachments exclude each other: the limit is already what the driver may use")
	}
	if f.luksPBKDFMemoryKiB < 8*1024 || f.luksPBKDFMemoryKiB > 4*1024*1024 {
		return fmt.Errorf("--luks-pbkdf-memory=%d: want 8192 (8 MiB) to 4194304 (4 GiB) KiB", f.luksPBKDFMemoryKiB)
	}
	if f.luksMaxPBKDFMemoryKiB < f.luksPBKDFMemoryKiB || f.luksMaxPBKDFMemoryKiB > 4*1024*1024 {
		return fmt.Errorf("--luks-max-pbkdf-memory=%d: want --luks-pbkdf-memory (%d KiB) to 4194304 (4 GiB) KiB: the node must open what it writes",
			f.luksMaxPBKDFMemoryKiB, f.luksPBKDFMemoryKiB)
	}
	if f.luksPBKDFIterations != 0 && (f.luksPBKDFIterations < 4 || f.luksPBKDFIterations > 1000) {
		return fmt.Errorf("--luks-pbkdf-iterations=%d: want 0 (tune to --luks-pbkdf-time) or 4 to 1000 passes", f.luksPBKDFIterations)
	}
	if f.luksPBKDFTime < 10*time.Millisecond || f.luksPBKDFTime > time.Minute {
		return fmt.Errorf("--luks-pbkdf-time=%s: want 10ms to 1m", f.luksPBKDFTime)
	}
	if f.kubeletRegistrationPath != "" && !filepath.IsAbs(f.kubeletRegistrationPath) {
		return fmt.Errorf("--kubelet-registration-path=%s: want an absolute path", f.kubeletRegistrationPath)
	}
	if strings.TrimSpace(f.tokenAudience) == "" {
		return errors.New("--workload-identity-audience: want the audience STS expects (sts.amazonaws.com)")
	}
	switch f.tokenPlace {
	case tokensFromCSIDriver, tokensInVolumeContext, tokensInRequestsSecrets:
	default:
		return fmt.Errorf("--workload-identity-tokens=%s: want %s, %s or %s", f.tokenPlace, tokensFromCSIDriver, tokensInVolumeContext, tokensInRequestsSecrets)
	}
	if f.csiProxyWait <= 0 {
		return fmt.Errorf("--csi-proxy-wait=%s: want a positive duration", f.csiProxyWait)
	}
	if f.windowsHostProcess && runtime.GOOS != "windows" {
		return fmt.Errorf("--windows-host-process is for Windows nodes, not %s", runtime.GOOS)
	}
	return nil
}

// buildNode builds the Node service and, when --kubelet-registration-path
// is set, starts registering the plugin with the kubelet once the CSI
// endpoint answers. It needs no cloud credentials: STS and KMS, reached
// through the SDK's standard endpoint settings (AWS_ENDPOINT_URL_STS,
// AWS_ENDPOINT_URL_KMS), are called with each publishing pod's own.
func buildNode(ctx context.Context, opts *options, reg prometheus.Registerer) (csi.NodeServer, func(), error) {
	f := &opts.node
	if err := f.validate(); err != nil {
		return nil, nil, err
	}
	sources, err := metadata.ParseSources(f.metadataSources)
	if err != nil {
		return nil, nil, err
	}
	host, err := connectCSIProxy(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	m, err := mounter.New(mounter.Options{DeviceLinkDir: f.deviceLinkDir, CSIProxy: host, EmulatorLoopDevices: f.emulatorLoopDevices,
		StateDir:           cmp.Or(f.windowsStateDir, `C:\var\lib\kubelet\plugins\`+opts.driverName),
		LUKSPBKDFMemoryKiB: f.luksPBKDFMemoryKiB, LUKSPBKDFTime: f.luksPBKDFTime, LUKSPBKDFIterations: f.luksPBKDFIterations, LUKSMaxPBKDFMemoryKiB: f.luksMaxPBKDFMemoryKiB})
	if err != nil {
		return nil, nil, errors.Join(err, closeHost(host))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("load the AWS SDK configuration (for STS and KMS): %w", err), closeHost(host))
	}
	// The Kubernetes API, where a node plugin can reach it: its CSIDriver
	// and events on pods. A plugin outside a pod (a test's) may have none.
	client, clientErr := kubeclient.New(opts.kubeconfig)
	place, watch := tokenPlace(f, client, clientErr, opts.driverName)
	var events node.PodEventer
	var recorder *podevents.Recorder
	if client != nil {
		recorder = podevents.New(client, os.Getenv(metadata.NodeNameEnv))
		events = recorder
	}
	stopEvents := func() {
		if recorder != nil {
			recorder.Shutdown()
		}
	}
	svc, err := node.New(node.Config{
		Metadata: func(ctx context.Context) (*metadata.Instance, error) {
			return metadata.Get(ctx, metadata.Options{Sources: sources})
		},
		Mounter:                   m,
		VolumeAttachLimit:         max(f.volumeAttachLimit, 0),
		ReservedVolumeAttachments: f.reservedVolumeAttachments,
		Unwrapper:                 datakeys.NewUnwrapper(awsCfg),
		TokenAudience:             f.tokenAudience,
		TokenPlace:                place,
		Events:                    events,
		Registerer:                reg,
	})
	if err != nil {
		stopEvents()
		return nil, nil, errors.Join(err, closeHost(host))
	}
	// Background work stops with ctx; the cleanup waits for it, so the
	// registration socket is gone before the process exits.
	var background sync.WaitGroup
	if watch != nil {
		background.Go(func() { watch.Run(ctx) })
	}
	// Learn the identity now, so a metadata problem shows in the log at
	// start-up; NodeGetInfo asks again if this fails.
	background.Go(func() {
		if _, err := svc.Instance(ctx); err != nil {
			klog.ErrorS(err, "Could not learn who this node is yet; NodeGetInfo will ask again", "sources", sources)
		}
	})
	if f.kubeletRegistrationPath != "" {
		endpoint, err := driver.ParseEndpoint(opts.endpoint)
		if err != nil {
			return nil, nil, err
		}
		reg := registration.New(opts.driverName, f.kubeletRegistrationPath)
		socket := registration.SocketPath(f.pluginRegistrationDir, opts.driverName)
		background.Go(func() {
			// The kubelet calls NodeGetInfo on the CSI socket as soon as it
			// sees the registration socket, so register only once it answers.
			if err := waitForEndpoint(ctx, endpoint); err != nil {
				return
			}
			if err := reg.Run(ctx, socket); err != nil {
				klog.ErrorS(err, "Kubelet plugin registration stopped", "socket", socket)
			}
		})
	}
	if nodeName := os.Getenv(metadata.NodeNameEnv); nodeName != "" {
		// In a cluster (the DaemonSet sets CSI_NODE_NAME): let pods that need
		// volumes onto this node once the kubelet knows the driver.
		background.Go(func() {
			err := startuptaint.Run(ctx, startuptaint.Config{NodeName: nodeName, DriverName: opts.driverName})
			if err != nil && ctx.Err() == nil {
				klog.ErrorS(err, "Startup taint not removed", "node", nodeName, "taint", startuptaint.Key(opts.driverName))
			}
		})
	}
	cleanup := func() {
		background.Wait()
		stopEvents()
		if err := closeHost(host); err != nil {
			klog.ErrorS(err, "Closing the connections to csi-proxy")
		}
	}
	return svc, cleanup, nil
}

// tokenPlace is where the node takes pods' tokens from: as stated by
// --workload-identity-tokens, or from a watch of the driver's CSIDriver,
// which the caller runs. Without a Kubernetes client the place cannot be
// told, and the publishes that need a token say so.
func tokenPlace(f *nodeFlags, client kubernetes.Interface, clientErr error, driverName string) (node.TokenPlacer, *tokenplace.Watch) {
	switch f.tokenPlace {
	case tokensInVolumeContext:
		return tokenplace.Fixed(false), nil
	case tokensInRequestsSecrets:
		return tokenplace.Fixed(true), nil
	}
	if err := clientErr; err != nil {
		klog.V(2).InfoS("No Kubernetes client: volumes unlocked with a pod's token are refused until --kubeconfig or --workload-identity-tokens says where the kubelet puts them",
			"err", err)
		return tokenplace.Unreadable{Err: fmt.Errorf("%w (a node outside a pod needs --kubeconfig, or --workload-identity-tokens=%s or %s)",
			err, tokensInVolumeContext, tokensInRequestsSecrets)}, nil
	}
	w := tokenplace.NewWatch(client, driverName)
	return w, w
}

// waitForEndpoint waits until the plugin's own CSI endpoint accepts
// connections, or ctx ends.
func waitForEndpoint(ctx context.Context, e driver.Endpoint) error {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, e.Network, e.Address)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
