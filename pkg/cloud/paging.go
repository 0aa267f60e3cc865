package cloud

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// pageCursor is where the next page of ListVolumes or ListSnapshots starts:
// an EC2 page (its NextToken; empty for the first) and how many items of
// that page earlier pages returned already. EC2 will not return pages of
// fewer than 5 items, while a CSI caller may ask for 1, so a page of ours
// can end inside one of EC2's; the cursor is the NextToken callers see.
type pageCursor struct {
	Token string `json:"t,omitempty"`
	Skip  int    `json:"s,omitempty"`
}

// encode renders the cursor as an opaque token; the zero cursor is "".
func (p pageCursor) encode() string {
	if p == (pageCursor{}) {
		return ""
	}
	b, _ := json.Marshal(p) // a struct of a string and an int always encodes
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor reads a token made by encode; anything else is
// ErrInvalidArgument (a CSI caller may replay a token from another driver).
func decodeCursor(token string) (pageCursor, error) {
	var p pageCursor
	if token == "" {
		return p, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err != nil || p.Skip < 0 {
		return pageCursor{}, fmt.Errorf("next token %q was not made by this driver: %w", token, ErrInvalidArgument)
	}
	return p, nil
}

// listPage returns up to maxItems items (0: as many as EC2 sends in one
// page) starting at token, and the token of the rest ("" at the end). fetch
// asks EC2 for one page: from its token, of at most size items (nil: EC2's
// default).
func listPage[T any](token string, maxItems, pageMax int32,
	fetch func(token *string, size *int32) (items []T, next *string, err error),
) ([]T, string, error) {
	cursor, err := decodeCursor(token)
	if err != nil {
		return nil, "", err
	}
	if maxItems < 0 {
		return nil, "", fmt.Errorf("max results %d: %w", maxItems, ErrInvalidArgument)
	}
	var size *int32
	if maxItems > 0 {
		size = aws.Int32(min(max(maxItems+int32(cursor.Skip), describePageMin), pageMax))
	}
	var ec2Token *string
	if cursor.Token != "" {
		ec2Token = aws.String(cursor.Token)
	}
	items, next, err := fetch(ec2Token, size)
	if err != nil {
		return nil, "", err
	}
	items = items[min(cursor.Skip, len(items)):]
	if maxItems > 0 && len(items) > int(maxItems) {
		rest := pageCursor{Token: cursor.Token, Skip: cursor.Skip + int(maxItems)}
		return items[:maxItems], rest.encode(), nil
	}
	return items, pageCursor{Token: aws.ToString(next)}.encode(), nil
}
