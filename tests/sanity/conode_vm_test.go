//go:build vm

package sanity

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// coNode serves, on a unix socket of the test's own, the node plugin as a CO
// sees a split deployment: every call goes to the node plugin at node, but
// the plugin's capabilities are those of the node and the controller
// together. csi-sanity's node specs ask the node's Identity service whether
// a Controller service exists (to attach a volume before staging it), which
// holds only where one process serves both; a node-mode plugin rightly says
// it serves no controller, and a CO, knowing the two apart, never asks it.
// It also puts expandSecrets into every NodeExpandVolume, as the kubelet
// does from a volume's node-expand secret: csi-sanity has no setting for
// that secret. It returns the socket's endpoint.
func coNode(t *testing.T, node, ctrl string, expandSecrets map[string]string) string {
	t.Helper()
	nodeConn := grpcDial(t, node)
	ctrlConn := grpcDial(t, ctrl)
	sock := filepath.Join(t.TempDir(), "conode.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		var req []byte
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		switch method {
		case "/csi.v1.Identity/GetPluginCapabilities":
			resp, err := unionCapabilities(stream.Context(), nodeConn, ctrlConn)
			if err != nil {
				return err
			}
			return stream.SendMsg(resp)
		case "/csi.v1.Node/NodeExpandVolume":
			if len(expandSecrets) > 0 {
				var err error
				if req, err = withSecrets(req, expandSecrets); err != nil {
					return err
				}
			}
		}
		var resp []byte
		if err := nodeConn.Invoke(stream.Context(), method, req, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
			return err
		}
		return stream.SendMsg(resp)
	}))
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return "unix://" + sock
}

// withSecrets adds secrets to an encoded NodeExpandVolumeRequest.
func withSecrets(encoded []byte, secrets map[string]string) ([]byte, error) {
	var req csi.NodeExpandVolumeRequest
	if err := proto.Unmarshal(encoded, &req); err != nil {
		return nil, err
	}
	req.Secrets = secrets
	return proto.Marshal(&req)
}

// unionCapabilities answers GetPluginCapabilities with the capabilities of
// both plugins, encoded.
func unionCapabilities(ctx context.Context, conns ...*grpc.ClientConn) ([]byte, error) {
	all := &csi.GetPluginCapabilitiesResponse{}
	for _, c := range conns {
		r, err := csi.NewIdentityClient(c).GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
		if err != nil {
			return nil, err
		}
		all.Capabilities = append(all.Capabilities, r.GetCapabilities()...)
	}
	return proto.Marshal(all)
}

func grpcDial(t *testing.T, endpoint string) *grpc.ClientConn {
	t.Helper()
	target := endpoint
	if path, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		target = "unix:" + path
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// rawCodec passes messages through as the bytes they are on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T is not []byte", v)
	}
	return b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T is not *[]byte", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "diskplane-raw" }
