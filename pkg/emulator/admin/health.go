package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// Paths of the volume health endpoints; {id} is a volume ID.
const (
	// PathVolumeHealth is what DescribeVolumeStatus reports about a volume
	// (GET, and PUT with a model.VolumeHealth document; {} is healthy).
	PathVolumeHealth = PathVolumes + "/{id}/health"
	// PathVolumeDevice is the volume's device on this host: PUT
	// {"failIO": true} makes every write to it fail with an I/O error
	// (reads still succeed), false heals it; a detach heals it too.
	PathVolumeDevice = PathVolumes + "/{id}/device"
)

// DeviceFault is the document of PathVolumeDevice.
type DeviceFault struct {
	// FailIO makes the device fail its writes while it stays attached.
	FailIO bool `json:"failIO"`
}

// handleVolumeHealth serves the volume health endpoints.
func handleVolumeHealth(mux *http.ServeMux, cloud *model.Cloud) {
	mux.HandleFunc("GET "+PathVolumeHealth, func(w http.ResponseWriter, r *http.Request) {
		h, err := cloud.VolumeHealthOf(r.PathValue("id"))
		if err != nil {
			writeModelError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, h)
	})
	mux.HandleFunc("PUT "+PathVolumeHealth, func(w http.ResponseWriter, r *http.Request) {
		var h model.VolumeHealth
		if !readJSON(w, r, &h) {
			return
		}
		if err := cloud.SetVolumeHealth(r.PathValue("id"), h); err != nil {
			writeModelError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, h)
	})
	mux.HandleFunc("PUT "+PathVolumeDevice, func(w http.ResponseWriter, r *http.Request) {
		var f DeviceFault
		if !readJSON(w, r, &f) {
			return
		}
		if err := cloud.FailVolumeIO(r.PathValue("id"), f.FailIO); err != nil {
			writeModelError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, f)
	})
}

// readJSON decodes a request's JSON document, refusing unknown fields; on
// failure it has answered 400.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxSettingDocument))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "malformed document: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// writeModelError answers an error of the model with the HTTP status that
// fits its EC2 code: an unknown volume or instance 404, a refused value 400, a volume
// that is not attached here 409, a store or data directory that cannot fail
// a device 501.
func writeModelError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	var me *model.Error
	switch {
	case errors.Is(err, model.ErrNoIOFaults), errors.Is(err, disks.ErrIOFaultsUnsupported):
		status = http.StatusNotImplemented
	case errors.Is(err, disks.ErrNotFound):
		status = http.StatusConflict
	case errors.As(err, &me):
		switch me.Code {
		case model.CodeInvalidVolumeNotFound, model.CodeInvalidInstanceIDNotFound:
			status = http.StatusNotFound
		case model.CodeInvalidParameterValue, model.CodeInvalidVolumeIDMalformed:
			status = http.StatusBadRequest
		case model.CodeIncorrectState, model.CodeIncorrectInstanceState:
			status = http.StatusConflict
		}
	}
	http.Error(w, err.Error(), status)
}
