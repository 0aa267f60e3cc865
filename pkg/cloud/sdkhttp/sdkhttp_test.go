package sdkhttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// recordingClient remembers the request it was given.
type recordingClient struct{ got *http.Request }

func (c *recordingClient) Do(r *http.Request) (*http.Response, error) {
	c.got = r
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

func TestWrapHidesWriterTo(t *testing.T) {
	tests := []struct {
		name       string
		body       io.ReadCloser
		wantPlain  bool
		wantSameRq bool
	}{
		{name: "body with WriteTo", body: io.NopCloser(strings.NewReader("Action=DescribeVolumes")), wantPlain: true},
		{name: "no body", body: nil, wantSameRq: true},
		{name: "http.NoBody", body: http.NoBody, wantSameRq: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "http://ec2.local/", nil)
			req.Body = tc.body
			rec := &recordingClient{}
			if _, err := Wrap(rec).Do(req); err != nil {
				t.Fatal(err)
			}
			if tc.wantSameRq != (rec.got == req) {
				t.Fatalf("request passed through unchanged = %v, want %v", rec.got == req, tc.wantSameRq)
			}
			if _, isWriterTo := rec.got.Body.(io.WriterTo); tc.wantPlain && isWriterTo {
				t.Fatal("the body still offers WriteTo")
			}
			if tc.wantPlain && req.Body != tc.body {
				t.Fatal("the caller's request was modified")
			}
		})
	}
}
