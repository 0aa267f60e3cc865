package driver

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// Credentials planted in every request of TestNoCredentialReachesLogsOrErrors.
const (
	plantedVolumeID   = "vol-0123456789abcdef0"
	plantedPassphrase = "luks-passphrase-correct-horse-battery"
	plantedContextJWT = "eyJhbGciOiJSUzI1NiJ9.context-token-payload.signature"
	plantedSecretJWT  = "eyJhbGciOiJSUzI1NiJ9.secrets-token-payload.signature"
)

func tokenJSON(jwt string) string {
	return fmt.Sprintf(`{"sts.amazonaws.com":{"token":%q,"expirationTimestamp":"2026-11-24T12:00:00Z"}}`, jwt)
}

// plant fills m the way a CO would fill it for a volume whose StorageClass
// uses every kind of secret and whose CSIDriver asks for tokens: every
// secrets map holds a passphrase and (as with serviceAccountTokenInSecrets)
// a token, every volume context holds a token (as without it), every other
// string names the volume. Nested messages are filled down to depth 3, one
// member per oneof.
func plant(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if oneof := fd.ContainingOneof(); oneof != nil && oneof.Fields().Get(0) != fd {
			continue
		}
		switch {
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.StringKind:
			entries := map[string]string{"fsType": "ext4"}
			switch {
			case isSecretField(fd):
				entries = map[string]string{"luks-passphrase": plantedPassphrase,
					volumecontext.ServiceAccountTokensKey: tokenJSON(plantedSecretJWT)}
			case isContextMap(fd):
				entries[volumecontext.ServiceAccountTokensKey] = tokenJSON(plantedContextJWT)
			}
			mp := m.Mutable(fd).Map()
			for k, v := range entries {
				mp.Set(protoreflect.ValueOfString(k).MapKey(), protoreflect.ValueOfString(v))
			}
		case fd.IsList() || fd.IsMap():
			if fd.IsList() && fd.Kind() == protoreflect.MessageKind && depth < 3 {
				plant(m.Mutable(fd).List().AppendMutable().Message(), depth+1)
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(plantedVolumeID))
		case fd.Kind() == protoreflect.MessageKind && depth < 3:
			plant(m.Mutable(fd).Message(), depth+1)
		}
	}
}

// newPlanted returns a message of the named type with credentials planted.
func newPlanted(t *testing.T, name protoreflect.FullName) proto.Message {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	m := mt.New()
	plant(m, 0)
	return m.Interface()
}

// TestNoCredentialReachesLogsOrErrors sends every RPC of the CSI spec,
// with every secret set and service-account tokens in both places the
// kubelet may put them, through the interceptor at V(10), to a handler as
// careless as a handler can be: it fails with the whole request in its
// error message. No credential may appear in the log or in the error the
// CO receives, while the request itself is logged.
func TestNoCredentialReachesLogsOrErrors(t *testing.T) {
	planted := []string{plantedPassphrase, plantedContextJWT, plantedSecretJWT}
	services := csi.File_csi_proto.Services()
	for i := range services.Len() {
		methods := services.Get(i).Methods()
		for j := range methods.Len() {
			md := methods.Get(j)
			method := fmt.Sprintf("/%s/%s", services.Get(i).FullName(), md.Name())
			t.Run(string(md.Name()), func(t *testing.T) {
				logs := testutil.CaptureKlog(t, 10)
				req := newPlanted(t, md.Input().FullName())
				resp := newPlanted(t, md.Output().FullName())
				leaky := func(ctx context.Context, req any) (any, error) {
					return resp, status.Errorf(codes.Internal, "cannot serve %v", req)
				}
				_, err := logAndMeasure(context.Background(), req, &grpc.UnaryServerInfo{FullMethod: method}, leaky)
				if status.Code(err) != codes.Internal {
					t.Fatalf("the handler's code was lost: %v", err)
				}
				out := logs.String()
				for _, c := range planted {
					if strings.Contains(out, c) {
						t.Errorf("%s reached the log:\n%s", c, out)
					}
					if strings.Contains(err.Error(), c) {
						t.Errorf("%s reached the returned error: %v", c, err)
					}
				}
				if md.Input().Fields().Len() > 0 && !strings.Contains(out, method) {
					t.Errorf("the request was not logged:\n%s", out)
				}
			})
		}
	}
}

// TestLoggableRedactsOnlyCredentials checks that the logged form keeps
// what an operator needs and that the request itself is left unchanged.
func TestLoggableRedactsOnlyCredentials(t *testing.T) {
	req := &csi.NodePublishVolumeRequest{
		VolumeId:      plantedVolumeID,
		TargetPath:    "/var/lib/kubelet/pods/x/volumes/y/mount",
		VolumeContext: map[string]string{volumecontext.ServiceAccountTokensKey: tokenJSON(plantedContextJWT), "csi.storage.k8s.io/pod.name": "web-0"},
		Secrets:       map[string]string{"luks-passphrase": plantedPassphrase},
	}
	logged := loggable(req).String()
	for _, want := range []string{plantedVolumeID, "web-0", redactedValue, "/var/lib/kubelet/pods/x/volumes/y/mount"} {
		if !strings.Contains(logged, want) {
			t.Errorf("logged form lacks %q: %s", want, logged)
		}
	}
	for _, c := range []string{plantedContextJWT, plantedPassphrase} {
		if strings.Contains(logged, c) {
			t.Errorf("logged form holds %q: %s", c, logged)
		}
	}
	if req.VolumeContext[volumecontext.ServiceAccountTokensKey] != tokenJSON(plantedContextJWT) {
		t.Error("loggable changed the request the handler sees")
	}
}

func TestScrubError(t *testing.T) {
	creds := []string{plantedPassphrase, "abc"}
	cases := []struct {
		name string
		err  error
		want string
		code codes.Code
	}{
		{"nil", nil, "", codes.OK},
		{"clean", status.Error(codes.NotFound, "volume vol-1 not found"), "volume vol-1 not found", codes.NotFound},
		{"leaky status", status.Errorf(codes.PermissionDenied, "wrong passphrase %s", plantedPassphrase), "wrong passphrase " + redactedValue, codes.PermissionDenied},
		{"leaky plain", fmt.Errorf("open with %s: exit 2", plantedPassphrase), "open with " + redactedValue + ": exit 2", codes.Unknown},
		{"too short to scrub", status.Error(codes.Internal, "abc def"), "abc def", codes.Internal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := scrubError(c.err, creds)
			if st := status.Convert(err); st.Message() != c.want || st.Code() != c.code {
				t.Errorf("got %v %q, want %v %q", st.Code(), st.Message(), c.code, c.want)
			}
		})
	}
}

func TestTokensIn(t *testing.T) {
	two := `{"a":{"token":"t1","expirationTimestamp":"x"},"b":{"token":"t2"}}`
	if got := tokensIn(two); len(got) != 2 {
		t.Errorf("tokensIn(%s) = %v, want both tokens", two, got)
	}
	for _, v := range []string{"", "not json", `["t1"]`, `{"a":{"expirationTimestamp":"x"}}`} {
		if got := tokensIn(v); len(got) != 0 {
			t.Errorf("tokensIn(%q) = %v, want none", v, got)
		}
	}
}
