package ec2api

import (
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// params reads an EC2 Query request's form: scalar members by name, lists
// flattened as Name.1, Name.2 …, structures in lists as Name.N.Member.
type params struct {
	v url.Values
}

// str returns a scalar parameter, empty when absent.
func (p params) str(name string) string { return p.v.Get(name) }

// has reports whether a parameter was sent.
func (p params) has(name string) bool { _, ok := p.v[name]; return ok }

// int32p reads an integer parameter; nil when absent.
func (p params) int32p(name string) (*int32, error) {
	if !p.has(name) {
		return nil, nil
	}
	s := p.v.Get(name)
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return nil, model.Errorf(model.CodeInvalidParameterValue, "Value (%s) for parameter %s is invalid. Expected an integer.", s, lowerFirst(name))
	}
	v := int32(n)
	return &v, nil
}

// int32v reads an integer parameter; 0 when absent.
func (p params) int32v(name string) (int32, error) {
	v, err := p.int32p(name)
	if err != nil || v == nil {
		return 0, err
	}
	return *v, nil
}

// boolp reads a boolean parameter; nil when absent.
func (p params) boolp(name string) (*bool, error) {
	if !p.has(name) {
		return nil, nil
	}
	s := p.v.Get(name)
	b, err := strconv.ParseBool(s)
	if err != nil {
		return nil, model.Errorf(model.CodeInvalidParameterValue, "Value (%s) for parameter %s is invalid. Expected a boolean.", s, lowerFirst(name))
	}
	return &b, nil
}

// boolv reads a boolean parameter; false when absent.
func (p params) boolv(name string) (bool, error) {
	v, err := p.boolp(name)
	if err != nil || v == nil {
		return false, err
	}
	return *v, nil
}

// indexes returns the list indexes N present under prefix (prefix.N or
// prefix.N.member), in numeric order.
func (p params) indexes(prefix string) []int {
	seen := map[int]bool{}
	for k := range p.v {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(num); err == nil && n > 0 {
			seen[n] = true
		}
	}
	out := make([]int, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// list reads a flattened list of strings: prefix.1, prefix.2 …
func (p params) list(prefix string) []string {
	var out []string
	for _, n := range p.indexes(prefix) {
		if v, ok := p.v[prefix+"."+strconv.Itoa(n)]; ok {
			out = append(out, v[0])
		}
	}
	return out
}

// filters reads Filter.N.Name and Filter.N.Value.M.
func (p params) filters() ([]model.Filter, error) {
	var out []model.Filter
	for _, n := range p.indexes("Filter") {
		base := "Filter." + strconv.Itoa(n)
		name := p.str(base + ".Name")
		if name == "" {
			return nil, model.Errorf(model.CodeInvalidParameterValue, "The filter name of %s must not be empty.", base)
		}
		out = append(out, model.Filter{Name: name, Values: p.list(base + ".Value")})
	}
	return out, nil
}

// tags reads a flattened tag list: prefix.N.Key / prefix.N.Value.
func (p params) tags(prefix string) (map[string]string, error) {
	var out map[string]string
	for _, n := range p.indexes(prefix) {
		base := prefix + "." + strconv.Itoa(n)
		if !p.has(base + ".Key") {
			return nil, model.Errorf(model.CodeMissingParameter, "The request must contain the parameter %s.Key", base)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[p.str(base+".Key")] = p.str(base + ".Value")
	}
	return out, nil
}

// tagSpecs reads TagSpecification.N for one resource type: the tags of
// specifications naming it (or naming none), and an error for a
// specification of a type this action does not create.
func (p params) tagSpecs(resourceType string) (map[string]string, error) {
	var out map[string]string
	for _, n := range p.indexes("TagSpecification") {
		base := "TagSpecification." + strconv.Itoa(n)
		if rt := p.str(base + ".ResourceType"); rt != "" && rt != resourceType {
			return nil, model.Errorf(model.CodeInvalidParameterValue, "'%s' is not a valid taggable resource type for this operation.", rt)
		}
		tags, err := p.tags(base + ".Tag")
		if err != nil {
			return nil, err
		}
		for k, v := range tags {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out, nil
}

// query reads the common Describe* parameters with the ID list under
// idPrefix (empty for actions without one).
func (p params) query(idPrefix string) (model.Query, error) {
	var q model.Query
	var err error
	if idPrefix != "" {
		q.IDs = p.list(idPrefix)
	}
	if q.Filters, err = p.filters(); err != nil {
		return q, err
	}
	if q.MaxResults, err = p.int32v("MaxResults"); err != nil {
		return q, err
	}
	q.NextToken = p.str("NextToken")
	return q, nil
}

// narrowed reports whether a Describe* request names IDs, filters or a
// page size; EC2 throttles the others in a stricter bucket.
func (p params) narrowed() bool {
	for k := range p.v {
		if k == "MaxResults" || strings.Contains(k, ".") {
			return true
		}
	}
	return false
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}
