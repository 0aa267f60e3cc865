// Package identityadmin serves the emulator's IAM and KMS declarations on
// its admin listener, so tests and scripts can declare OIDC providers,
// roles, access keys and keys at run time, and revoke them (a trust policy
// or key policy without a role, a disabled key) while a driver runs.
package identityadmin

import (
	"encoding/json"
	"io"
	"net/http"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
)

// Paths of the admin API.
const (
	// IAMPath serves the IAM configuration: GET answers it (secrets left
	// out), PUT replaces it with the document's (an iam.Config) and answers
	// the configuration now in force.
	IAMPath = "/iam"
	// KMSKeysPath serves the keys: GET lists them (never their material);
	// PUT <KMSKeysPath>/<id> declares the key with that ID from a
	// kms.KeySpec document (creating it, or changing its aliases,
	// description, state and policy) and answers it.
	KMSKeysPath = "/kms/keys"
)

// maxDocument bounds a request body.
const maxDocument = 1 << 20

// Register adds the IAM and KMS routes to the admin listener's mux. A
// refused document answers 400 with the reason.
func Register(mux *http.ServeMux, identities *iam.Store, keys *kms.Store) {
	mux.HandleFunc("GET "+IAMPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, identities.Config())
	})
	mux.HandleFunc("PUT "+IAMPath, func(w http.ResponseWriter, r *http.Request) {
		var cfg iam.Config
		if !readJSON(w, r, &cfg) {
			return
		}
		if err := identities.SetConfig(cfg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, identities.Config())
	})
	mux.HandleFunc("GET "+KMSKeysPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, keys.Keys())
	})
	mux.HandleFunc("PUT "+KMSKeysPath+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		var spec kms.KeySpec
		if !readJSON(w, r, &spec) {
			return
		}
		spec.ID = r.PathValue("id")
		info, err := keys.Declare(spec)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, info)
	})
}

// readJSON decodes the request's document into v, or answers 400.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	doc, err := io.ReadAll(io.LimitReader(r.Body, maxDocument))
	if err == nil {
		err = json.Unmarshal(doc, v)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		klog.ErrorS(err, "Writing an admin response failed")
	}
}
