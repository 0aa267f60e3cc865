package csiproxyapi

import (
	"encoding/json"
	"fmt"
	"net/http"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/winhost"
)

// Admin API paths of the csi-proxy emulator.
const (
	// PathDisks: GET lists every disk the host has seen (winhost.DiskView);
	// PUT records what a volume holds (a winhost.Disk), as another system
	// would have left it.
	PathDisks = "/disks"
	// PathFaults: POST arms misbehaviours of the host (a Faults): a call
	// that fails once, or times out after the host did the work; the
	// volumes of new partitions arriving late; disks that cannot be opened.
	PathFaults = "/faults"
	// PathHealth answers ok.
	PathHealth = "/healthz"
)

// Faults is the body of a POST to PathFaults.
type Faults struct {
	// FailNext are armed in order (winhost.Host.FailNext).
	FailNext []winhost.Fault `json:"failNext,omitempty"`
	// DelayNewVolumes, when set, is how many listings of its disk's volumes
	// the volume of each new partition is missing from
	// (winhost.Host.DelayNewVolumes).
	DelayNewVolumes *int `json:"delayNewVolumes,omitempty"`
	// Unopenable makes the disk of each volume ID listed one that Windows
	// lists but cannot open (true), or an ordinary one again (false):
	// while one is attached, listing the disks fails as a whole
	// (winhost.Host.SetUnopenable).
	Unopenable map[string]bool `json:"unopenable,omitempty"`
}

// AdminHandler serves the emulator's view of the host over HTTP, for tests
// and people: what each disk holds, where its volumes are mounted, how
// often each was formatted. It is not part of csi-proxy.
func AdminHandler(host *winhost.Host) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET "+PathDisks, func(w http.ResponseWriter, _ *http.Request) {
		disks, err := host.Disks()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if disks == nil {
			disks = []winhost.DiskView{}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(disks)
	})
	mux.HandleFunc("PUT "+PathDisks, func(w http.ResponseWriter, r *http.Request) {
		var d winhost.Disk
		if err := json.NewDecoder(r.Body).Decode(&d); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := host.SetDisk(d); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		klog.InfoS("Disk layout set through the admin API", "volumeID", d.VolumeID, "style", d.Style, "partitions", len(d.Partitions))
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST "+PathFaults, func(w http.ResponseWriter, r *http.Request) {
		var f Faults
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, fault := range f.FailNext {
			if fault.Op == "" {
				http.Error(w, "a fault needs the operation it strikes (op)", http.StatusBadRequest)
				return
			}
		}
		for _, fault := range f.FailNext {
			host.FailNext(fault)
		}
		if f.DelayNewVolumes != nil {
			host.DelayNewVolumes(*f.DelayNewVolumes)
		}
		for volumeID, on := range f.Unopenable {
			host.SetUnopenable(volumeID, on)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}
