package emulator

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"

	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/identityadmin"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
	"github.com/diskplane/diskplane/pkg/emulator/servicemetrics"
	"github.com/diskplane/diskplane/pkg/emulator/sts"
)

// newServices builds the account's IAM, its KMS keys (kept in the data
// directory, when there is one) and the counter of their requests.
func (e *Emulator) newServices(cfg Config) error {
	var err error
	if e.IAM, err = iam.New(e.Cloud.AccountID(), cfg.IAM, nil); err != nil {
		return fmt.Errorf("IAM: %w", err)
	}
	if e.Keys, err = kms.NewStore(e.Cloud.Region(), e.Cloud.AccountID(), cfg.Cloud.DataDir, cfg.KMS); err != nil {
		return err
	}
	if e.Services, err = servicemetrics.New(e.Registry); err != nil {
		return err
	}
	return nil
}

// maxPeekBytes is how much of a form body apiHandler reads to tell STS
// from EC2: more than any request of either (the EC2 handler refuses
// bigger bodies itself).
const maxPeekBytes = 1 << 20

// apiHandler answers EC2, STS and KMS on one listener, telling them apart
// by protocol as an SDK sends them: KMS by its X-Amz-Target header, STS by
// the Version of its Query request (EC2's is 2016-11-15, STS's 2011-06-15).
func apiHandler(ec2, stsHandler, kmsHandler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case kms.IsRequest(r):
			kmsHandler.ServeHTTP(w, r)
		case sts.IsRequest(queryOf(r)):
			stsHandler.ServeHTTP(w, r)
		default:
			ec2.ServeHTTP(w, r)
		}
	})
}

// queryOf reads a Query request's parameters without consuming its body:
// the bytes read are put back in front of the rest.
func queryOf(r *http.Request) url.Values {
	values := r.URL.Query()
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.Method != http.MethodPost || mediaType != "application/x-www-form-urlencoded" || r.Body == nil {
		return values
	}
	head, err := io.ReadAll(io.LimitReader(r.Body, maxPeekBytes))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	if err != nil {
		return values
	}
	if form, err := url.ParseQuery(string(head)); err == nil {
		for k, v := range form {
			values[k] = append(values[k], v...)
		}
	}
	return values
}

// adminHandler is the admin listener: the IAM and KMS declarations (package
// identityadmin) beside everything else the admin API serves.
func adminHandler(rest http.Handler, identities *iam.Store, keys *kms.Store) http.Handler {
	mux := http.NewServeMux()
	identityadmin.Register(mux, identities, keys)
	mux.Handle("/", rest)
	return mux
}
