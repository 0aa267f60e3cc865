package driver

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

// redactedValue replaces every credential in what the plugin logs or returns.
const redactedValue = "***redacted***"

// minScrubLength is the shortest credential scrubbed out of error messages:
// replacing every occurrence of a shorter string would garble the message
// while protecting nothing (such a string occurs in any text by chance).
const minScrubLength = 4

// credentialContextKeys are the volume-context keys whose values are
// credentials. protosanitizer blanks only the fields the CSI spec marks
// csi_secret, but the kubelet puts the pod's service-account tokens into
// the volume context of NodePublishVolume when the CSIDriver asks for them
// (tokenRequests) and has not opted into receiving them as secrets; those
// must never reach a log either (CVE-2023-2878 and CVE-2024-3744 were this
// leak in other drivers).
var credentialContextKeys = []string{volumecontext.ServiceAccountTokensKey}

// loggable returns a form of a CSI request or response that is safe to log
// at any verbosity: csi_secret fields stripped, and the values of
// credential keys in every volume context replaced.
func loggable(msg any) fmt.Stringer {
	m, ok := msg.(proto.Message)
	if !ok || m == nil {
		return protosanitizer.StripSecrets(msg)
	}
	m = proto.Clone(m)
	redactContexts(m.ProtoReflect())
	return protosanitizer.StripSecrets(m)
}

// redactContexts replaces, in place, the credential values of every
// volume_context map in m and in the messages it holds.
func redactContexts(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case isContextMap(fd):
			for _, key := range credentialContextKeys {
				k := protoreflect.ValueOfString(key).MapKey()
				if v.Map().Has(k) {
					v.Map().Set(k, protoreflect.ValueOfString(redactedValue))
				}
			}
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			for i := range v.List().Len() {
				redactContexts(v.List().Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				redactContexts(mv.Message())
				return true
			})
		case !fd.IsMap() && fd.Kind() == protoreflect.MessageKind:
			redactContexts(v.Message())
		}
		return true
	})
}

// isContextMap reports whether fd is a string map that carries a volume
// context (volume_context in requests and in csi.Volume).
func isContextMap(fd protoreflect.FieldDescriptor) bool {
	return fd.IsMap() && fd.Name() == "volume_context" && fd.MapValue().Kind() == protoreflect.StringKind
}

// isSecretField reports whether the CSI spec marks fd as a secret.
func isSecretField(fd protoreflect.FieldDescriptor) bool {
	secret, ok := proto.GetExtension(fd.Options(), csi.E_CsiSecret).(bool)
	return ok && secret
}

// credentials lists every credential a request carries: the values of its
// csi_secret fields and of the credential keys of its volume contexts, and,
// for the kubelet's service-account token JSON, each token on its own (an
// error that quotes one token must be scrubbed as well as one that quotes
// the whole value).
func credentials(msg any) []string {
	m, ok := msg.(proto.Message)
	if !ok || m == nil {
		return nil
	}
	var out []string
	add := func(key, value string) {
		out = append(out, value)
		if key == volumecontext.ServiceAccountTokensKey {
			out = append(out, tokensIn(value)...)
		}
	}
	var walk func(protoreflect.Message)
	walk = func(m protoreflect.Message) {
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsMap() && fd.MapValue().Kind() == protoreflect.StringKind && (isSecretField(fd) || isContextMap(fd)):
				secret := isSecretField(fd)
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					if secret || slices.Contains(credentialContextKeys, k.String()) {
						add(k.String(), mv.String())
					}
					return true
				})
			case !fd.IsMap() && !fd.IsList() && fd.Kind() == protoreflect.StringKind && isSecretField(fd):
				add("", v.String())
			case !fd.IsMap() && !fd.IsList() && fd.Kind() == protoreflect.MessageKind:
				walk(v.Message())
			case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
				for i := range v.List().Len() {
					walk(v.List().Get(i).Message())
				}
			}
			return true
		})
	}
	walk(m.ProtoReflect())
	return out
}

// tokensIn returns the tokens of the kubelet's service-account token value,
// {"<audience>":{"token":"<JWT>","expirationTimestamp":"…"}}; nothing when
// the value is not of that form.
func tokensIn(value string) []string {
	var byAudience map[string]struct {
		Token string `json:"token"`
	}
	if json.Unmarshal([]byte(value), &byAudience) != nil {
		return nil
	}
	var out []string
	for _, t := range byAudience {
		if t.Token != "" {
			out = append(out, t.Token)
		}
	}
	return out
}

// scrubError returns err with every credential of the request replaced in
// its message, keeping its gRPC code. Handlers should never put a
// credential into an error, but the error travels to the CO (which shows it
// in events) and into the log, so the interceptor makes sure.
func scrubError(err error, creds []string) error {
	if err == nil || len(creds) == 0 {
		return err
	}
	st := status.Convert(err)
	msg := st.Message()
	scrubbed := msg
	for _, c := range creds {
		if len(c) >= minScrubLength {
			scrubbed = strings.ReplaceAll(scrubbed, c, redactedValue)
		}
	}
	if scrubbed == msg {
		return err
	}
	return status.Error(st.Code(), scrubbed)
}
