package motoserver

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// Unimplemented are the EC2 actions Diskplane uses that moto 5.2.1 does not
// implement. moto answers them with an HTML page and status 500, which the
// SDK takes for a passing server fault and retries until the caller's
// deadline (30 s a call). EC2 answers an action it does not know with 400
// InvalidAction, as do EC2-API clouds without these newer actions; the
// harness answers these so, in front of moto, and the driver is proven to
// live with a cloud that lacks them.
var Unimplemented = map[string]bool{
	"DescribeVolumeStatus": true, // volume status checks
	"CopyVolumes":          true, // volume clones
}

// front serves the server's URL: the actions in Unimplemented answered as
// EC2 answers an action it does not know, everything else passed to moto
// unchanged.
func front(backend string) (*http.Server, string, error) {
	target, err := url.Parse(backend)
	if err != nil {
		return nil, "", err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		action, err := RequestAction(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if Unimplemented[action] {
			w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+
				`<Response><Errors><Error><Code>InvalidAction</Code><Message>The action %s is not valid for this web service.</Message></Error></Errors>`+
				`<RequestID>moto-harness</RequestID></Response>`, action)
			return
		}
		proxy.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	return srv, "http://" + l.Addr().String(), nil
}

// RequestAction returns the action an EC2 Query API request names, and
// leaves its body to be read again (by a proxy passing it on).
func RequestAction(r *http.Request) (string, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return "", err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	form, _ := url.ParseQuery(string(body))
	return form.Get("Action"), nil
}
