package guestagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// The agent's HTTP API, under /v1/disks:
//
//	GET    /v1/disks                    the exposed volumes ([]Disk)
//	PUT    /v1/disks/{id}               expose a volume; body {"image": path}; answers the Disk
//	DELETE /v1/disks/{id}[?force=true]  remove its device; 409 while busy
//	POST   /v1/disks/{id}/resize        show the image's new size; 404 when not exposed
//
// Errors are {"error": message} with 400 (bad input), 404, 409 or 500.

// attachRequest is the body of PUT /v1/disks/{id}.
type attachRequest struct {
	Image string `json:"image"`
}

// errorBody is the body of every error answer.
type errorBody struct {
	Error string `json:"error"`
}

// Handler serves an Exposer over HTTP.
func Handler(x Exposer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/disks", func(w http.ResponseWriter, r *http.Request) {
		disks, err := x.List()
		reply(w, disks, err)
	})
	mux.HandleFunc("PUT /v1/disks/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		var req attachRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Image == "" {
			replyError(w, http.StatusBadRequest, fmt.Errorf("want a JSON body {\"image\": path}: %v", err))
			return
		}
		if err := ValidateVolumeID(id); err != nil {
			replyError(w, http.StatusBadRequest, err)
			return
		}
		disk, err := x.Attach(id, req.Image)
		reply(w, disk, err)
	})
	mux.HandleFunc("DELETE /v1/disks/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		force := false
		if v := r.URL.Query().Get("force"); v != "" {
			var err error
			if force, err = strconv.ParseBool(v); err != nil {
				replyError(w, http.StatusBadRequest, fmt.Errorf("force=%s: want true or false", v))
				return
			}
		}
		if err := ValidateVolumeID(id); err != nil {
			replyError(w, http.StatusBadRequest, err)
			return
		}
		reply(w, nil, x.Detach(id, force))
	})
	mux.HandleFunc("POST /v1/disks/{id}/resize", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if err := ValidateVolumeID(id); err != nil {
			replyError(w, http.StatusBadRequest, err)
			return
		}
		reply(w, nil, x.Resize(id))
	})
	return mux
}

// reply answers v as JSON, or the error with the status its kind calls for.
func reply(w http.ResponseWriter, v any, err error) {
	switch {
	case errors.Is(err, ErrBusy):
		replyError(w, http.StatusConflict, err)
	case errors.Is(err, ErrNotAttached):
		replyError(w, http.StatusNotFound, err)
	case err != nil:
		klog.ErrorS(err, "Guest agent request failed")
		replyError(w, http.StatusInternalServerError, err)
	case v == nil:
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
}

func replyError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(errorBody{Error: err.Error()})
}

// requestTimeout bounds one call to the agent: an attach in the guest takes
// a fraction of a second, a detach waits for the guest's kernel to let go.
const requestTimeout = 60 * time.Second

// Client calls an agent. It implements Exposer, so the emulator's disk
// store uses the guest as if it were local.
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client of the agent at base, e.g. http://127.0.0.1:8703.
func NewClient(base string) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("guest agent address %q: want http://host:port", base)
	}
	return &Client{base: u.String(), http: &http.Client{Timeout: requestTimeout}}, nil
}

// Attach implements Exposer.
func (c *Client) Attach(volumeID, image string) (Disk, error) {
	var d Disk
	body, err := json.Marshal(attachRequest{Image: image})
	if err != nil {
		return d, err
	}
	err = c.do(http.MethodPut, "/v1/disks/"+url.PathEscape(volumeID), body, &d)
	return d, err
}

// Detach implements Exposer.
func (c *Client) Detach(volumeID string, force bool) error {
	return c.do(http.MethodDelete, "/v1/disks/"+url.PathEscape(volumeID)+"?force="+strconv.FormatBool(force), nil, nil)
}

// Resize implements Exposer.
func (c *Client) Resize(volumeID string) error {
	return c.do(http.MethodPost, "/v1/disks/"+url.PathEscape(volumeID)+"/resize", nil, nil)
}

// List implements Exposer.
func (c *Client) List() ([]Disk, error) {
	var disks []Disk
	err := c.do(http.MethodGet, "/v1/disks", nil, &disks)
	return disks, err
}

// do sends one request and decodes the answer into out (when not nil),
// turning error answers back into the sentinel errors they stand for.
func (c *Client) do(method, path string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("guest agent: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("guest agent: read the answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e errorBody
		msg := string(data)
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		switch resp.StatusCode {
		case http.StatusConflict:
			return fmt.Errorf("%w: %s", ErrBusy, strings.TrimPrefix(msg, ErrBusy.Error()+": "))
		case http.StatusNotFound:
			return fmt.Errorf("%w: %s", ErrNotAttached, strings.TrimPrefix(msg, ErrNotAttached.Error()+": "))
		default:
			return fmt.Errorf("guest agent: %s %s: %s: %s", method, path, resp.Status, msg)
		}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("guest agent: decode the answer to %s %s: %w", method, path, err)
	}
	return nil
}
