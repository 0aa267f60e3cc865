package model

import (
	"encoding/base64"
	"slices"
	"strings"
	"time"
)

// Filter is one EC2 filter: the resource matches when any of its values for
// Name matches any of Values. Values may use the wildcards * and ?.
type Filter struct {
	Name   string
	Values []string
}

// Query is what every Describe* call takes.
type Query struct {
	// IDs restricts the answer to these resources; an unknown ID is an
	// error, as on EC2.
	IDs []string
	// Filters must all match (each filter's values are alternatives).
	Filters []Filter
	// MaxResults asks for a page of at most this many; 0 means not given.
	MaxResults int32
	// NextToken continues a previous page.
	NextToken string
	// Hide leaves out resources created less than this long ago, as an
	// eventually consistent EC2 can (the eventual-consistency fault). Such
	// resources are unknown to this query, also when asked for by ID.
	Hide time.Duration
	// Lag answers from the cloud as it was this long ago (the stale-reads
	// fault): states, attachments, tags and modifications alike.
	Lag time.Duration
}

// Page is one page of a Describe* answer.
type Page[T any] struct {
	Items []T
	// NextToken is set when more results follow.
	NextToken string
}

// pageRules are an action's MaxResults bounds.
type pageRules struct {
	// param names the ID list in EC2's error for combining it with
	// MaxResults; empty when the combination is allowed.
	param string
	min   int32
	max   int32
	// byDefault is the page size when MaxResults is not given; 0 means all.
	byDefault int32
}

// checkPaging validates MaxResults against the action's bounds and returns
// the page size (0 for everything).
func checkPaging(q Query, r pageRules) (int, *Error) {
	if q.MaxResults == 0 {
		return int(r.byDefault), nil
	}
	if r.param != "" && len(q.IDs) > 0 {
		return 0, Errorf(CodeInvalidParameterCombination, "The parameter %s cannot be used with the parameter maxResults", r.param)
	}
	if q.MaxResults < r.min {
		return 0, Errorf(CodeInvalidParameterValue, "Value ( %d ) for parameter maxResults is invalid. Expecting a value greater than %d.", q.MaxResults, r.min)
	}
	// EC2 answers at most its maximum for a larger value rather than failing.
	return int(min(q.MaxResults, r.max)), nil
}

// paginate sorts items by key, skips past the token and cuts a page.
func paginate[T any](items []T, key func(T) string, q Query, size int) (Page[T], *Error) {
	slices.SortFunc(items, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	if q.NextToken != "" {
		after, err := base64.RawURLEncoding.DecodeString(q.NextToken)
		if err != nil || len(after) == 0 {
			return Page[T]{}, Errorf(CodeInvalidPaginationToken, "The pagination token %q is invalid.", q.NextToken)
		}
		i, _ := slices.BinarySearchFunc(items, string(after), func(it T, k string) int { return strings.Compare(key(it), k) })
		for i < len(items) && key(items[i]) <= string(after) {
			i++
		}
		items = items[i:]
	}
	if size <= 0 || len(items) <= size {
		return Page[T]{Items: items}, nil
	}
	page := items[:size]
	return Page[T]{Items: page, NextToken: base64.RawURLEncoding.EncodeToString([]byte(key(page[size-1])))}, nil
}

// fieldFunc returns a resource's values for a filter name; known is false
// for a name the resource type does not support.
type fieldFunc[T any] func(item T, name string) (values []string, known bool)

// filterItems keeps the items that match every filter. tags returns an
// item's tags for the generic tag:<key> and tag-key filters.
func filterItems[T any](items []T, filters []Filter, field fieldFunc[T], tags func(T) map[string]string) ([]T, *Error) {
	for _, f := range filters {
		if !strings.HasPrefix(f.Name, "tag:") && f.Name != "tag-key" {
			var zero T
			if _, known := field(zero, f.Name); !known {
				return nil, Errorf(CodeInvalidParameterValue, "The filter '%s' is invalid", f.Name)
			}
		}
	}
	out := items[:0:0]
	for _, it := range items {
		ok := true
		for _, f := range filters {
			var vals []string
			switch {
			case strings.HasPrefix(f.Name, "tag:"):
				if v, has := tags(it)[strings.TrimPrefix(f.Name, "tag:")]; has {
					vals = []string{v}
				}
			case f.Name == "tag-key":
				for k := range tags(it) {
					vals = append(vals, k)
				}
			default:
				vals, _ = field(it, f.Name)
			}
			if !anyMatch(f.Values, vals) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, it)
		}
	}
	return out, nil
}

// anyMatch reports whether any pattern matches any value.
func anyMatch(patterns, values []string) bool {
	for _, p := range patterns {
		for _, v := range values {
			if globMatch(p, v) {
				return true
			}
		}
	}
	return false
}

// globMatch matches EC2 filter wildcards: * is any run of characters, ? is
// one character, and \ escapes the next character.
func globMatch(pattern, s string) bool {
	p := []rune(pattern)
	r := []rune(s)
	// Classic two-pointer wildcard match with backtracking to the last *.
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(r) {
		switch {
		case pi < len(p) && p[pi] == '\\' && pi+1 < len(p) && p[pi+1] == r[si]:
			pi += 2
			si++
		case pi < len(p) && p[pi] != '*' && p[pi] != '\\' && (p[pi] == '?' || p[pi] == r[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// boolString renders a boolean as EC2 filter values do.
func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// visible reports whether a resource created at created shows in a query
// made at now that hides resources younger than hide.
func visible(created, now time.Time, hide time.Duration) bool {
	return hide <= 0 || !created.After(now.Add(-hide))
}

// sortByID orders items by their ID, for stable listings.
func sortByID[T any](items []T, id func(T) string) {
	slices.SortFunc(items, func(a, b T) int { return strings.Compare(id(a), id(b)) })
}
