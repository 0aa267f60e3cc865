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
	// PathHealth answers ok.
	PathHealth = "/healthz"
)

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
	return mux
}
