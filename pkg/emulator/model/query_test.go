package model

import (
	"slices"
	"testing"
	"time"
)

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"vol-1", "vol-1", true},
		{"vol-1", "vol-12", false},
		{"vol-*", "vol-12", true},
		{"*", "", true},
		{"", "", true},
		{"", "x", false},
		{"vol-?", "vol-1", true},
		{"vol-?", "vol-12", false},
		{"*-1c", "us-east-1c", true},
		{"*-c", "us-east-1c", false},
		{"us-*-1?", "us-east-1a", true},
		{"a*b*c", "a-x-b-y-c", true},
		{"a*b*c", "a-x-c-y-b", false},
		{`a\*b`, "a*b", true},
		{`a\*b`, "axb", false},
		{`what\?`, "what?", true},
	}
	for _, tc := range tests {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func TestCheckPaging(t *testing.T) {
	rules := pageRules{param: "volumeSet", min: 5, max: 500}
	tests := []struct {
		name     string
		q        Query
		r        pageRules
		want     int
		wantCode string
	}{
		{name: "not given means all", q: Query{}, r: rules, want: 0},
		{name: "in range", q: Query{MaxResults: 7}, r: rules, want: 7},
		{name: "minimum", q: Query{MaxResults: 5}, r: rules, want: 5},
		{name: "below minimum", q: Query{MaxResults: 4}, r: rules, wantCode: CodeInvalidParameterValue},
		{name: "above maximum is capped", q: Query{MaxResults: 1000}, r: rules, want: 500},
		{name: "with IDs refused", q: Query{MaxResults: 5, IDs: []string{"vol-1"}}, r: rules, wantCode: CodeInvalidParameterCombination},
		{name: "with IDs allowed for some actions", q: Query{MaxResults: 5, IDs: []string{"vol-1"}}, r: pageRules{min: 5, max: 500}, want: 5},
		{name: "default page size", q: Query{}, r: pageRules{min: 5, max: 100, byDefault: 100}, want: 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkPaging(tc.q, tc.r)
			if c := errCode(err); c != tc.wantCode {
				t.Fatalf("error = %v, want %q", err, tc.wantCode)
			}
			if err == nil && got != tc.want {
				t.Fatalf("size = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPaginate(t *testing.T) {
	items := []string{"e", "a", "d", "b", "c", "g", "f"}
	id := func(s string) string { return s }
	var all []string
	token := ""
	pages := 0
	for {
		page, err := paginate(slices.Clone(items), id, Query{NextToken: token}, 3)
		if err != nil {
			t.Fatalf("paginate: %v", err)
		}
		all = append(all, page.Items...)
		pages++
		if page.NextToken == "" {
			break
		}
		token = page.NextToken
	}
	if want := []string{"a", "b", "c", "d", "e", "f", "g"}; !slices.Equal(all, want) || pages != 3 {
		t.Fatalf("pages = %d, items = %v, want 3 pages of %v", pages, all, want)
	}

	// A token stays valid when the item it names is gone.
	first, _ := paginate(slices.Clone(items), id, Query{}, 2)
	rest, err := paginate([]string{"a", "c", "d"}, id, Query{NextToken: first.NextToken}, 0)
	if err != nil || !slices.Equal(rest.Items, []string{"c", "d"}) {
		t.Fatalf("after a deletion: %v, %v", rest.Items, err)
	}

	if _, err := paginate(items, id, Query{NextToken: "!!not-base64"}, 2); errCode(err) != "InvalidPaginationToken" {
		t.Fatalf("bad token: %v", err)
	}
}

func TestFilterItems(t *testing.T) {
	type item struct {
		id   string
		zone string
		tags map[string]string
	}
	items := []item{
		{"a", "z1", map[string]string{"team": "red", "env": "prod"}},
		{"b", "z2", map[string]string{"team": "blue"}},
		{"c", "z1", nil},
	}
	field := func(it item, name string) ([]string, bool) {
		switch name {
		case "id":
			return []string{it.id}, true
		case "zone":
			return []string{it.zone}, true
		}
		return nil, false
	}
	tags := func(it item) map[string]string { return it.tags }
	tests := []struct {
		name     string
		filters  []Filter
		want     []string
		wantCode string
	}{
		{name: "none", want: []string{"a", "b", "c"}},
		{name: "one value", filters: []Filter{{Name: "zone", Values: []string{"z1"}}}, want: []string{"a", "c"}},
		{name: "values are alternatives", filters: []Filter{{Name: "id", Values: []string{"a", "b"}}}, want: []string{"a", "b"}},
		{name: "filters all apply", filters: []Filter{{Name: "zone", Values: []string{"z1"}}, {Name: "id", Values: []string{"c", "b"}}}, want: []string{"c"}},
		{name: "tag value", filters: []Filter{{Name: "tag:team", Values: []string{"red"}}}, want: []string{"a"}},
		{name: "tag wildcard", filters: []Filter{{Name: "tag:team", Values: []string{"*"}}}, want: []string{"a", "b"}},
		{name: "tag-key", filters: []Filter{{Name: "tag-key", Values: []string{"env"}}}, want: []string{"a"}},
		{name: "no match", filters: []Filter{{Name: "zone", Values: []string{"z9"}}}, want: nil},
		{name: "unknown filter", filters: []Filter{{Name: "colour", Values: []string{"x"}}}, wantCode: CodeInvalidParameterValue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := filterItems(items, tc.filters, field, tags)
			if c := errCode(err); c != tc.wantCode {
				t.Fatalf("error = %v, want %q", err, tc.wantCode)
			}
			var ids []string
			for _, it := range got {
				ids = append(ids, it.id)
			}
			if !slices.Equal(ids, tc.want) {
				t.Fatalf("got %v, want %v", ids, tc.want)
			}
		})
	}
}

func TestVisible(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	tests := []struct {
		created time.Time
		hide    time.Duration
		want    bool
	}{
		{now, 0, true},
		{now, time.Second, false},
		{now.Add(-time.Second), time.Second, true},
		{now.Add(-999 * time.Millisecond), time.Second, false},
	}
	for _, tc := range tests {
		if got := visible(tc.created, now, tc.hide); got != tc.want {
			t.Errorf("visible(%v, hide %v) = %v, want %v", tc.created, tc.hide, got, tc.want)
		}
	}
}
