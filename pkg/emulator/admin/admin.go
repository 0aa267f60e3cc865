// Package admin serves the EC2 emulator's admin listener: Prometheus metrics
// (per-action request counts and latencies), a health check, the fault
// setting and the account quotas as JSON (read and change at run time), each
// volume's health (what DescribeVolumeStatus reports, and a device that fails
// its I/O; health.go), and read-only JSON views of the emulated cloud for
// scripts and demos. It is a separate listener from the EC2 endpoint so a
// driver under test never sees it.
package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// maxSettingDocument bounds a fault- or quota-setting request body.
const maxSettingDocument = 1 << 20

// Paths of the admin API.
const (
	PathMetrics      = "/metrics"
	PathHealth       = "/healthz"
	PathFaults       = "/faults"
	PathReleaseStuck = "/faults/release-stuck-attachments"
	PathQuotas       = "/quotas"
	PathVolumes      = "/volumes"
	PathSnapshots    = "/snapshots"
	PathInstances    = "/instances"
	// PathInstanceState stops or starts an instance (PUT {"state":
	// "stopped"|"running"}): the machine behind a node lost, or back.
	PathInstanceState = PathInstances + "/{id}/state"
	// PathInstanceStatus makes a running instance's guest hang or answer
	// again (PUT {"impaired": true|false}): DescribeInstanceStatus reports
	// its instance status check impaired meanwhile.
	PathInstanceStatus = PathInstances + "/{id}/status"
	PathAudit          = "/audit"
	// PathTransitions lists the times the recent state changes were given
	// (model.Draw), for a client's measurements to be set against.
	PathTransitions   = "/transitions"
	contentTypeJSON   = "application/json"
	headerContentType = "Content-Type"
)

// NewHandler returns the admin API over a cloud, its faults and the
// registry holding the emulator's metrics.
func NewHandler(cloud *model.Cloud, f *faults.Faults, g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+PathMetrics, promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET "+PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	handleSetting(mux, PathFaults, f.Config, f.Set, f.Patch)
	handleSetting(mux, PathQuotas, cloud.Quotas, cloud.SetQuotas, cloud.PatchQuotas)
	mux.HandleFunc("POST "+PathReleaseStuck, func(w http.ResponseWriter, _ *http.Request) {
		n := cloud.ReleaseStuckAttachments()
		klog.InfoS("Released stuck attachments", "count", n)
		writeJSON(w, http.StatusOK, map[string]int{"released": n})
	})
	mux.HandleFunc("GET "+PathVolumes, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, nonNil(cloud.Volumes()))
	})
	handleVolumeHealth(mux, cloud)
	mux.HandleFunc("GET "+PathSnapshots, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, nonNil(cloud.Snapshots()))
	})
	mux.HandleFunc("GET "+PathInstances, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, nonNil(cloud.Instances()))
	})
	handlePutInstance(mux, PathInstanceState, func(id string, doc InstanceStateDoc) error { return cloud.SetInstanceState(id, doc.State) })
	handlePutInstance(mux, PathInstanceStatus, func(id string, doc InstanceStatusDoc) error { return cloud.SetInstanceImpaired(id, doc.Impaired) })
	mux.HandleFunc("GET "+PathTransitions, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, nonNil(cloud.Draws()))
	})
	mux.HandleFunc("GET "+PathAudit, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, cloud.Audit())
	})
	return mux
}

// InstanceStateDoc is the document of PathInstanceState.
type InstanceStateDoc struct {
	State model.InstanceState `json:"state"`
}

// InstanceStatusDoc is the document of PathInstanceStatus.
type InstanceStatusDoc struct {
	Impaired bool `json:"impaired"`
}

// handlePutInstance serves PUT on an instance's path (its {id}): the
// document goes to apply, and is the answer when apply takes it.
func handlePutInstance[T any](mux *http.ServeMux, path string, apply func(id string, doc T) error) {
	mux.HandleFunc("PUT "+path, func(w http.ResponseWriter, r *http.Request) {
		var doc T
		if !readJSON(w, r, &doc) {
			return
		}
		if err := apply(r.PathValue("id"), doc); err != nil {
			writeModelError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, doc)
	})
}

// handleSetting serves a run-time setting (faults, quotas) at path: GET
// answers the setting in force, PUT replaces it with the document's (what
// the document leaves out gets its default), PATCH changes only what the
// document names. PUT and PATCH answer the setting now in force, or 400
// with the reason when the document is refused.
func handleSetting[T any](mux *http.ServeMux, path string, current func() T, set func(T) error, patch func([]byte) error) {
	mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, current())
	})
	mux.HandleFunc("PUT "+path, func(w http.ResponseWriter, r *http.Request) {
		changeSetting(w, r, current, func(doc []byte) error {
			var v T
			if err := json.Unmarshal(doc, &v); err != nil {
				return err
			}
			return set(v)
		})
	})
	mux.HandleFunc("PATCH "+path, func(w http.ResponseWriter, r *http.Request) {
		changeSetting(w, r, current, patch)
	})
}

// changeSetting reads a setting document, applies it and answers the
// setting now in force.
func changeSetting[T any](w http.ResponseWriter, r *http.Request, current func() T, apply func([]byte) error) {
	doc, err := io.ReadAll(io.LimitReader(r.Body, maxSettingDocument))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := apply(doc); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, http.StatusOK, current())
}

// nonNil turns a nil list into an empty one, so JSON shows [] not null.
func nonNil[T any](items []T) []T {
	if items == nil {
		return []T{}
	}
	return items
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set(headerContentType, contentTypeJSON)
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		klog.ErrorS(err, "Writing an admin response failed")
	}
}
