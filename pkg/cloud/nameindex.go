package cloud

import (
	"context"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"
)

// volumeNameIndex is the set of names (TagVolumeName values) that one
// complete listing of the account's named volumes found, and when that
// listing was sent. It spares CreateVolume the lookup by name of a name no
// volume could carry unseen.
//
// Why that is safe: the lookup before a create exists for a volume whose
// ClientToken EC2 has forgotten; for any younger volume the token makes EC2
// answer with it (or refuse the token, upon which the name is looked up
// anyway: see tokenRefused). EC2 remembers a token for at least
// ClientTokenMemory after the request that sent it, so a volume EC2 no
// longer knows by its token was asked for more than that long ago, was
// visible VisibilityTimeout after, and so is in every listing sent since
// then. A listing younger than ClientTokenMemory less VisibilityTimeout
// therefore names every volume whose token may be forgotten: a name it does
// not hold is new, or belongs to a volume the token finds. An older listing
// is read again before it is trusted.
//
// The zero maxAge turns the index off: every name may exist (a cloud that
// keeps no ClientToken, such as moto). A listing that fails leaves the index
// as it was and, until listingRetry has passed, every name may exist: the
// creates look their names up meanwhile rather than each list again while
// EC2 throttles or fails. It is safe for concurrent use; concurrent calls
// share one listing.
type volumeNameIndex struct {
	maxAge time.Duration
	now    func() time.Time

	mu sync.Mutex
	// names and sent: the last complete listing, sent (its first page)
	// at sent; a zero sent means none yet.
	names map[string]struct{}
	sent  time.Time
	// listing is closed when the listing under way ends; nil when none is.
	listing chan struct{}
	// failed is when the last listing failed, if it did.
	failed time.Time
}

// listingRetry is how long after a failed listing the next is made.
const listingRetry = time.Minute

func newVolumeNameIndex(maxAge time.Duration) *volumeNameIndex {
	return &volumeNameIndex{maxAge: max(maxAge, 0), now: time.Now}
}

// mayExist reports whether a volume named name may exist unseen by
// EC2's ClientToken: false only when a listing younger than maxAge lacks
// the name. list reads every named volume's name when the index has no
// such listing; calls that come meanwhile wait for it.
func (x *volumeNameIndex) mayExist(ctx context.Context, name string, list func(context.Context) (map[string]struct{}, error)) bool {
	if x.maxAge == 0 {
		return true
	}
	for {
		x.mu.Lock()
		if !x.sent.IsZero() && x.now().Sub(x.sent) < x.maxAge {
			_, ok := x.names[name]
			x.mu.Unlock()
			return ok
		}
		if !x.failed.IsZero() && x.now().Sub(x.failed) < listingRetry {
			x.mu.Unlock()
			return true
		}
		if wait := x.listing; wait != nil {
			x.mu.Unlock()
			select {
			case <-wait:
				if x.fresh() {
					continue
				}
				return true // that listing failed
			case <-ctx.Done():
				return true
			}
		}
		done := make(chan struct{})
		x.listing = done
		x.mu.Unlock()
		x.read(ctx, list, done)
		if !x.fresh() {
			return true
		}
	}
}

// read makes one listing and, when it is complete, stores it.
func (x *volumeNameIndex) read(ctx context.Context, list func(context.Context) (map[string]struct{}, error), done chan struct{}) {
	sent := x.now()
	names, err := list(ctx)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.listing = nil
	close(done)
	if err != nil {
		x.failed = x.now()
		klog.V(2).InfoS("Could not list the volumes' names; creates look their names up until a listing succeeds", "retryIn", listingRetry, "err", err)
		return
	}
	x.names, x.sent, x.failed = names, sent, time.Time{}
	klog.V(4).InfoS("Listed the volumes' names", "volumes", len(names))
}

// fresh reports whether the index holds a listing younger than maxAge.
func (x *volumeNameIndex) fresh() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return !x.sent.IsZero() && x.now().Sub(x.sent) < x.maxAge
}

// listVolumeNames returns the TagVolumeName values of every volume that
// carries the tag, in any state, from a complete paged listing.
func (c *ec2Cloud) listVolumeNames(ctx context.Context) (map[string]struct{}, error) {
	names := map[string]struct{}{}
	p := ec2.NewDescribeVolumesPaginator(c.ec2, &ec2.DescribeVolumesInput{
		Filters:    []types.Filter{{Name: aws.String("tag-key"), Values: []string{TagVolumeName}}},
		MaxResults: aws.Int32(describeVolumesPageMax),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, c.retry.use(opDescribeVolumes))
		if err != nil {
			return nil, classify(opDescribeVolumes, err)
		}
		for _, v := range page.Volumes {
			names[tagValue(v.Tags, TagVolumeName)] = struct{}{}
		}
	}
	return names, nil
}
