package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/driver/controller"
	"github.com/diskplane/diskplane/pkg/driver/parameters"
	"github.com/diskplane/diskplane/pkg/kubeclient"
	"github.com/diskplane/diskplane/pkg/nodewitness"
	"github.com/diskplane/diskplane/pkg/snapshotintent"
)

// controllerFlags are the flags that only the controller service reads.
type controllerFlags struct {
	extraTags            string
	clusterID            string
	modifyCoalesceWindow time.Duration
	userAgentExtra       string
	visibilityTimeout    time.Duration
	clientTokenMemory    time.Duration
	snapshotIntents      bool
	nodeWitness          bool
	nodeWitnessInterval  time.Duration
}

func (f *controllerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.extraTags, "extra-tags", "",
		"tags for every volume and snapshot the driver creates, as key=value pairs separated by commas (e.g. team=storage,env=prod)")
	fs.StringVar(&f.clusterID, "k8s-tag-cluster-id", "",
		"when set, every volume and snapshot gets the tag kubernetes.io/cluster/<id>=owned")
	fs.DurationVar(&f.modifyCoalesceWindow, "modify-volume-coalesce-window", controller.DefaultModifyCoalesceWindow,
		"how long a volume expansion or modification waits for the other one for the same volume, so both become one EC2 ModifyVolume; keep it well below the external-resizer's --timeout")
	fs.StringVar(&f.userAgentExtra, "user-agent-extra", "",
		"appended to the user agent of EC2 calls (e.g. helm), so CloudTrail shows how this driver was installed")
	fs.DurationVar(&f.visibilityTimeout, "visibility-timeout", cloud.DefaultVisibilityTimeout,
		"the longest EC2's reads may lag behind a request that made a volume, snapshot or modification: a volume missing that long after CreateVolume is taken to be gone, and until that long after a request (or after this process started) a lookup that finds nothing does not allow making the resource again")
	fs.DurationVar(&f.clientTokenMemory, "client-token-memory", cloud.DefaultClientTokenMemory,
		"how long EC2 is trusted to remember the ClientToken of a CreateVolume: a create looks its name up first only when a listing of the named volumes, "+
			"made at most this less --visibility-timeout ago, holds the name; 0 for a cloud that ignores ClientToken (every create looks its name up). "+
			"Longer than the cloud's memory risks a second volume for a name")
	fs.BoolVar(&f.snapshotIntents, "snapshot-intents", true,
		"record this process on each VolumeSnapshotContent (annotation <driver-name>/create-snapshot-sent-by) before asking EC2 for its snapshot, "+
			"so that a successor which finds no other process there asks at once instead of waiting out --visibility-timeout after its start; "+
			"needs the Kubernetes API (the pod's service account or --kubeconfig) and patch on volumesnapshotcontents")
	fs.BoolVar(&f.nodeWitness, "node-witness", false,
		"let EC2 testify for lost nodes: the replica holding the Lease <driver-name>-node-witness gives a Node that is not Ready, and whose instance EC2 reports "+
			"stopping, stopped, shutting-down, terminated or unknown, the out-of-service taint (Kubernetes then deletes its pods and detaches their volumes at once), "+
			"and removes it when the Node is Ready and its instance runs; a running instance is never tainted. It also measures the detaches EC2 has not finished "+
			"and names one that a running instance holds up for 30s (events on its PersistentVolume and Node: stop the instance). Needs the Kubernetes API: "+
			"get, list and update on nodes, get on csinodes, list on volumeattachments and persistentvolumes, create on events, and leases in the pod's namespace")
	fs.DurationVar(&f.nodeWitnessInterval, "node-witness-interval", nodewitness.DefaultInterval,
		"how often the node witness looks at the Nodes")
}

// buildController builds the cloud from the SDK's standard configuration
// (AWS_REGION or instance metadata, the default credential chain,
// AWS_ENDPOINT_URL_EC2) and the Controller service over it, with KMS
// reached through the same configuration (AWS_ENDPOINT_URL_KMS). Bad flags fail
// here, before the plugin starts serving.
func buildController(ctx context.Context, opts *options, reg prometheus.Registerer) (csi.ControllerServer, func(), error) {
	f := &opts.controller
	if f.modifyCoalesceWindow <= 0 {
		return nil, nil, fmt.Errorf("--modify-volume-coalesce-window=%v: want a positive duration", f.modifyCoalesceWindow)
	}
	if f.visibilityTimeout <= 0 {
		return nil, nil, fmt.Errorf("--visibility-timeout=%v: want a positive duration", f.visibilityTimeout)
	}
	if f.nodeWitnessInterval <= 0 {
		return nil, nil, fmt.Errorf("--node-witness-interval=%v: want a positive duration", f.nodeWitnessInterval)
	}
	if f.clientTokenMemory < 0 {
		return nil, nil, fmt.Errorf("--client-token-memory=%v: want 0 (the cloud keeps no ClientToken) or a positive duration", f.clientTokenMemory)
	}
	extraTags, err := parameters.ParseTagList("--extra-tags", f.extraTags)
	if err != nil {
		return nil, nil, err
	}
	awsCfg, err := cloud.LoadAWSConfig(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	c, err := cloud.NewFromAWSConfig(awsCfg, cloud.Config{UserAgentExtra: f.userAgentExtra, Registerer: reg, VisibilityTimeout: f.visibilityTimeout,
		ClientTokenMemory: f.clientTokenMemory, NoClientTokens: f.clientTokenMemory == 0})
	if err != nil {
		return nil, nil, err
	}
	intents, err := snapshotIntents(opts)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	svc, err := controller.New(c, controller.Options{
		DriverName:           opts.driverName,
		ExtraTags:            extraTags,
		ClusterID:            f.clusterID,
		ModifyCoalesceWindow: f.modifyCoalesceWindow,
		Keys:                 datakeys.NewWrapper(awsCfg),
		SnapshotIntents:      intents,
	})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	stopWitness := func() {}
	if f.nodeWitness {
		if stopWitness, err = startNodeWitness(ctx, opts, c, reg); err != nil {
			svc.Close()
			c.Close()
			return nil, nil, err
		}
	}
	return svc, func() { stopWitness(); svc.Close(); c.Close() }, nil
}

// snapshotIntents is the ledger the controller records its snapshot
// intents in, through the Kubernetes API: nil when --snapshot-intents is
// off, or when the plugin runs outside a pod without --kubeconfig (then the
// first snapshot of a name within --visibility-timeout of the start waits
// that out, as the log says).
func snapshotIntents(opts *options) (controller.SnapshotIntents, error) {
	if !opts.controller.snapshotIntents {
		klog.V(2).InfoS("Snapshot intents are not recorded (--snapshot-intents=false): the first snapshot of a name within --visibility-timeout of this start waits that out")
		return nil, nil
	}
	client, err := kubeclient.NewDynamic(opts.kubeconfig)
	if err != nil {
		if opts.kubeconfig == "" && errors.Is(err, rest.ErrNotInCluster) {
			klog.InfoS("Snapshot intents are not recorded: not in a pod and no --kubeconfig; the first snapshot of a name within --visibility-timeout of this start waits that out")
			return nil, nil
		}
		return nil, fmt.Errorf("--snapshot-intents: %w", err)
	}
	ledger, err := snapshotintent.New(client, opts.driverName)
	if err != nil {
		return nil, fmt.Errorf("--snapshot-intents: %w", err)
	}
	return ledger, nil
}
