package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/mounter"
)

// checkedOS is a node OS whose host side can stop answering, as a Windows
// node's csi-proxy can.
type checkedOS struct {
	*fakeOS
	hostErr error
}

func (c *checkedOS) CheckHost(context.Context) error { return c.hostErr }

// TestProbeAsksTheHost checks that the node's Probe (and so /healthz)
// fails while the host side does not answer, and passes on a node without
// one.
func TestProbeAsksTheHost(t *testing.T) {
	plain, _ := newTestService(t)
	if err := plain.Probe(context.Background()); err != nil {
		t.Fatalf("Probe of a node without a host side = %v", err)
	}
	os := &checkedOS{fakeOS: newFakeOS()}
	s, err := New(Config{Metadata: staticMetadata(testInstance()), Mounter: os, ReservedVolumeAttachments: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Probe(context.Background()); err != nil {
		t.Fatalf("Probe with the host answering = %v", err)
	}
	os.hostErr = errors.New("the disk API v1 does not answer")
	if err := s.Probe(context.Background()); !errors.Is(err, os.hostErr) {
		t.Fatalf("Probe with the host gone = %v, want %v", err, os.hostErr)
	}
}

func TestOSErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{mounter.ErrDeviceNotFound, codes.NotFound},
		{mounter.ErrWrongDevice, codes.FailedPrecondition},
		{mounter.ErrFilesystemMismatch, codes.FailedPrecondition},
		{mounter.ErrHostUnavailable, codes.Unavailable},
		{errors.New("mkfs failed"), codes.Internal},
	} {
		err := osError(context.Background(), "stage", fmt.Errorf("wrapped: %w", tc.err))
		if status.Code(err) != tc.want {
			t.Errorf("osError(%v) = %v, want %s", tc.err, err, tc.want)
		}
	}
}
