// Package sdkhttp adapts the HTTP client the AWS SDK sends EC2 requests with.
//
// smithy-go closes a request's body as soon as the response headers arrive.
// When the body offers io.WriterTo, net/http's transport finishes sending it
// with a last read that a closed body answers with an error, and the
// transport then tears the connection down while the response body is still
// being read ("use of closed network connection" on responses larger than
// the read buffer). Only a fast, nearby endpoint answers inside that window
// — an EC2-compatible cloud on the local network, or ec2-emulator — so
// against such endpoints large Describe responses failed and were retried.
// Hiding WriteTo makes the transport send the body with plain reads, which
// see a clean end of stream.
package sdkhttp

import (
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Wrap returns an SDK HTTP client that sends request bodies through Read
// only, delegating everything else to next.
func Wrap(next aws.HTTPClient) aws.HTTPClient {
	return plainBodyClient{next: next}
}

// Transport is Wrap for code that builds an *http.Client itself (tests
// pointing an SDK client at an emulator).
func Transport(base http.RoundTripper) http.RoundTripper {
	return plainBodyTransport{base: base}
}

type plainBodyClient struct{ next aws.HTTPClient }

func (c plainBodyClient) Do(r *http.Request) (*http.Response, error) {
	return c.next.Do(withPlainBody(r))
}

type plainBodyTransport struct{ base http.RoundTripper }

func (t plainBodyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.base.RoundTrip(withPlainBody(r))
}

// plainBody exposes only Read and Close of a request body.
type plainBody struct{ io.ReadCloser }

func withPlainBody(r *http.Request) *http.Request {
	if r.Body == nil || r.Body == http.NoBody {
		return r
	}
	shallow := *r
	shallow.Body = plainBody{r.Body}
	return &shallow
}
