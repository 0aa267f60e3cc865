package node

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
)

// TestTokensOnlyFromWhereTheKubeletPutsThem: the node unlocks with the
// token in the field of the request the CSIDriver says the kubelet fills,
// and ignores one in the other field, which a user's node-publish Secret
// (or an edited PersistentVolume) could have put there.
func TestTokensOnlyFromWhereTheKubeletPutsThem(t *testing.T) {
	pod, planted := podToken("shop", "db-0", "db"), podToken("bank", "ledger-0", "ledger")
	tests := []struct {
		name              string
		inSecrets         bool
		placeErr          error
		secrets, vcTokens string // tokens in each field ("": none)
		wantToken         string // what KMS was asked with ("": nothing asked)
		wantCode          codes.Code
		wantMessage       string
	}{
		{name: "volume context, a token planted in the secrets", vcTokens: pod, secrets: planted, wantToken: pod},
		{name: "secrets, a token planted in the volume context", inSecrets: true, secrets: pod, vcTokens: planted, wantToken: pod},
		{name: "volume context, only a planted token in the secrets", secrets: planted, wantCode: codes.InvalidArgument,
			wantMessage: "passed none in the request's volume context: the CSIDriver object needs tokenRequests with audience \"sts.amazonaws.com\" (the chart's csiDriver.workloadIdentity.enabled); the tokens in its secrets are not the kubelet's (the CSIDriver's serviceAccountTokenInSecrets is false) and were ignored"},
		{name: "secrets, only a planted token in the volume context", inSecrets: true, vcTokens: planted, wantCode: codes.InvalidArgument,
			wantMessage: "the tokens in its volume context are not the kubelet's (the CSIDriver's serviceAccountTokenInSecrets is true)"},
		{name: "the CSIDriver not read yet", placeErr: errors.New("the CSIDriver ebs.csi.diskplane.io has not been read"), vcTokens: pod,
			wantCode: codes.Unavailable, wantMessage: "where the kubelet puts it cannot be told: the CSIDriver ebs.csi.diskplane.io has not been read"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newWorkloadRig(t)
			r.stage(t)
			r.place.set(tc.inSecrets, tc.placeErr)
			req := publishReq(mountCap("ext4"))
			req.VolumeContext = kmsContext()
			if tc.secrets != "" {
				req.Secrets = map[string]string{volumecontext.ServiceAccountTokensKey: tokensJSON(tc.secrets, time.Now().Add(time.Hour))}
			}
			if tc.vcTokens != "" {
				req.VolumeContext[volumecontext.ServiceAccountTokensKey] = tokensJSON(tc.vcTokens, time.Now().Add(time.Hour))
			}
			before := len(r.changes())
			_, err := r.s.NodePublishVolume(context.Background(), req)
			wantCode(t, err, tc.wantCode)
			if !strings.Contains(status.Convert(err).Message(), tc.wantMessage) {
				t.Fatalf("message %q lacks %q", status.Convert(err).Message(), tc.wantMessage)
			}
			var asked []string
			for _, c := range r.kms.calls {
				asked = append(asked, c.Token)
			}
			switch {
			case tc.wantToken == "" && (len(asked) != 0 || len(r.changes()) != before):
				t.Fatalf("a refused publish asked KMS %d times and did %q", len(asked), r.changes()[before:])
			case tc.wantToken != "" && !slices.Equal(asked, []string{tc.wantToken}):
				t.Fatalf("KMS was asked with the planted token (or not once): %d calls", len(asked))
			}
		})
	}
}
