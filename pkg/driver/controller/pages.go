package controller

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/cloud"
)

// Bounds of the page size the controller asks the cloud for: EC2's
// DescribeVolumes and DescribeSnapshots refuse fewer than 5 results per page.
const (
	minCloudPage = 5
	maxCloudPage = 500
)

// pageToken is where a paginated list continues: a cloud page (its token
// and the page size it was fetched with, so the same page comes back) and
// how many entries of it were already returned. CSI callers may ask for
// fewer entries than a cloud page holds, so one cloud page can span several
// CSI pages.
type pageToken struct {
	cloudToken string
	pageSize   int32
	offset     int
}

// tokenVersion starts every token, so a later format can tell old tokens apart.
const tokenVersion = "1"

func (t pageToken) encode() string {
	raw := strings.Join([]string{tokenVersion, strconv.Itoa(int(t.pageSize)), strconv.Itoa(t.offset), t.cloudToken}, ":")
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// decodePageToken reads a starting_token; anything this controller did not
// write is Aborted, which tells the caller to list again from the start.
func decodePageToken(s string) (pageToken, error) {
	if s == "" {
		return pageToken{}, nil
	}
	bad := status.Errorf(codes.Aborted, "starting token %q is not valid; list again from the start", s)
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return pageToken{}, bad
	}
	parts := strings.SplitN(string(raw), ":", 4)
	if len(parts) != 4 || parts[0] != tokenVersion {
		return pageToken{}, bad
	}
	size, err1 := strconv.ParseInt(parts[1], 10, 32)
	offset, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || size < 0 || size > maxCloudPage || offset < 0 {
		return pageToken{}, bad
	}
	return pageToken{cloudToken: parts[3], pageSize: int32(size), offset: offset}, nil
}

// cloudPageSize is the cloud page size for a CSI max_entries (0: the cloud's default).
func cloudPageSize(maxEntries int32) int32 {
	if maxEntries == 0 {
		return 0
	}
	return min(max(maxEntries, minCloudPage), maxCloudPage)
}

// fetchPage reads one cloud page: the entries (already filtered) and the
// cloud's token for the next page ("" at the end).
type fetchPage[T any] func(ctx context.Context, cloudToken string, pageSize int32) ([]T, string, error)

// paginate returns at most maxEntries (0: no limit) entries starting at
// startingToken, and the token for the rest ("" when there is no more). It
// skips empty cloud pages, which EC2 returns when a filter matched nothing
// in a stretch of resources.
func paginate[T any](ctx context.Context, what, startingToken string, maxEntries int32, fetch fetchPage[T]) ([]T, string, error) {
	if maxEntries < 0 {
		return nil, "", invalidArgument("max_entries %d must not be negative", maxEntries)
	}
	tok, err := decodePageToken(startingToken)
	if err != nil {
		return nil, "", err
	}
	if startingToken == "" {
		tok.pageSize = cloudPageSize(maxEntries)
	}
	for {
		items, next, err := fetch(ctx, tok.cloudToken, tok.pageSize)
		if err != nil {
			if tok.cloudToken != "" && errors.Is(err, cloud.ErrInvalidArgument) {
				return nil, "", status.Errorf(codes.Aborted, "starting token is no longer valid (%v); list again from the start", err)
			}
			return nil, "", failed(err, "list %s", what)
		}
		rest := items[min(tok.offset, len(items)):]
		if maxEntries > 0 && len(rest) > int(maxEntries) {
			more := pageToken{cloudToken: tok.cloudToken, pageSize: tok.pageSize, offset: tok.offset + int(maxEntries)}
			return rest[:maxEntries], more.encode(), nil
		}
		if next == "" {
			return rest, "", nil
		}
		if next == tok.cloudToken {
			return nil, "", status.Errorf(codes.Internal, "list %s: the cloud returned the same page token twice", what)
		}
		tok = pageToken{cloudToken: next, pageSize: tok.pageSize}
		if len(rest) > 0 {
			return rest, tok.encode(), nil
		}
	}
}
