package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/kubeclient"
	"github.com/diskplane/diskplane/pkg/nodewitness"
)

// witnessComponent is the source component of the node witness's events.
const witnessComponent = "diskplane-controller"

// Leader election of the node witness: only one controller replica taints
// Nodes. A replica that dies holding the Lease hands it on within
// witnessLeaseDuration.
const (
	witnessLeaseDuration = 15 * time.Second
	witnessRenewDeadline = 10 * time.Second
	witnessRetryPeriod   = 2 * time.Second
)

// podNamespaceFile is where a pod's service account names its namespace.
const podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// startNodeWitness runs the node witness while this process holds the
// Lease <driver-name>-node-witness in the pod's namespace (POD_NAMESPACE,
// else the service account's, else default), contending again whenever it
// loses it, until ctx ends. The returned func waits for it to stop.
func startNodeWitness(ctx context.Context, opts *options, ec2 nodewitness.EC2, reg prometheus.Registerer) (func(), error) {
	kube, err := kubeclient.New(opts.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--node-witness needs the Kubernetes API (the pod's service account or --kubeconfig): %w", err)
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	identity, _ := os.Hostname()
	identity += "-" + uuid.NewString()[:8]
	w, err := nodewitness.New(kube, ec2, nodewitness.Config{
		DriverName: opts.driverName,
		Interval:   opts.controller.nodeWitnessInterval,
		Recorder:   broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: witnessComponent, Host: identity}),
		Registerer: reg,
	})
	if err != nil {
		broadcaster.Shutdown()
		return nil, err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: opts.driverName + "-node-witness", Namespace: podNamespace()},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
				Lock: lock, LeaseDuration: witnessLeaseDuration, RenewDeadline: witnessRenewDeadline, RetryPeriod: witnessRetryPeriod,
				ReleaseOnCancel: true, Name: "node-witness",
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: w.Run,
					OnStoppedLeading: func() {
						klog.V(2).InfoS("Node witness not running here: this replica does not hold the lease", "lease", lock.LeaseMeta.Name)
					},
				},
			})
		}
	}()
	return func() { wg.Wait(); broadcaster.Shutdown() }, nil
}

// podNamespace is the namespace of the controller's pod.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(podNamespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b))
	}
	return metav1.NamespaceDefault
}
