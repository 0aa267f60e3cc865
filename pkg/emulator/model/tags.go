package model

import (
	"strings"
	"time"
	"unicode/utf8"
)

// EC2's tag restrictions.
const (
	maxTagsPerResource = 50
	maxTagKeyLength    = 128
	maxTagValueLength  = 256
)

// checkTags validates tag keys and values as EC2 does.
func checkTags(tags map[string]string) *Error {
	if len(tags) > maxTagsPerResource {
		return Errorf(CodeTagLimitExceeded, "The maximum number of tags per resource (%d) was exceeded.", maxTagsPerResource)
	}
	for k, v := range tags {
		if e := checkTag(k, v); e != nil {
			return e
		}
	}
	return nil
}

func checkTag(key, value string) *Error {
	switch {
	case key == "":
		return Errorf(CodeInvalidParameterValue, "Tag key cannot be empty.")
	case utf8.RuneCountInString(key) > maxTagKeyLength:
		return Errorf(CodeInvalidParameterValue, "Tag key exceeds the maximum length of %d characters.", maxTagKeyLength)
	case utf8.RuneCountInString(value) > maxTagValueLength:
		return Errorf(CodeInvalidParameterValue, "Tag value exceeds the maximum length of %d characters.", maxTagValueLength)
	case strings.HasPrefix(strings.ToLower(key), "aws:"):
		return Errorf(CodeInvalidParameterValue, "Tag keys starting with 'aws:' are reserved for internal use.")
	}
	return nil
}

// taggable finds the tag map of a resource by ID, with EC2's errors for a
// malformed or unknown ID.
func (c *Cloud) taggable(id string, now time.Time) (*map[string]string, *Error) {
	switch {
	case strings.HasPrefix(id, "vol-"):
		v, e := c.volumeByID(id, 0, now)
		if e != nil {
			return nil, e
		}
		return &v.Tags, nil
	case strings.HasPrefix(id, "snap-"):
		s, e := c.snapshotByID(id)
		if e != nil {
			return nil, e
		}
		return &s.Tags, nil
	case strings.HasPrefix(id, "i-"):
		in, e := c.instanceByID(id)
		if e != nil {
			return nil, e
		}
		return &in.Tags, nil
	}
	return nil, Errorf(CodeInvalidID, "The ID '%s' is not valid", id)
}

// CreateTags adds or overwrites tags on volumes, snapshots and instances.
// All resources are checked before any is changed.
func (c *Cloud) CreateTags(ids []string, tags map[string]string, dryRun bool) error {
	return c.do(func(now time.Time) error {
		if len(ids) == 0 {
			return Errorf(CodeMissingParameter, "The request must contain the parameter resourceIdSet")
		}
		if len(tags) == 0 {
			return Errorf(CodeMissingParameter, "The request must contain the parameter tagSet")
		}
		if e := checkTags(tags); e != nil {
			return e
		}
		targets := make([]*map[string]string, 0, len(ids))
		for _, id := range ids {
			t, e := c.taggable(id, now)
			if e != nil {
				return e
			}
			n := len(*t)
			for k := range tags {
				if _, has := (*t)[k]; !has {
					n++
				}
			}
			if n > maxTagsPerResource {
				return Errorf(CodeTagLimitExceeded, "The maximum number of tags per resource (%d) was exceeded for '%s'.", maxTagsPerResource, id)
			}
			targets = append(targets, t)
		}
		if dryRun {
			return dryRunError()
		}
		for _, t := range targets {
			if *t == nil {
				*t = map[string]string{}
			}
			for k, v := range tags {
				(*t)[k] = v
			}
		}
		c.markDirty()
		return nil
	})
}

// TagToDelete names a tag for DeleteTags; a nil Value deletes the key
// whatever its value, a set Value only when it matches.
type TagToDelete struct {
	Key   string
	Value *string
}

// DeleteTags removes tags from resources; with no tags it removes them all.
func (c *Cloud) DeleteTags(ids []string, tags []TagToDelete, dryRun bool) error {
	return c.do(func(now time.Time) error {
		if len(ids) == 0 {
			return Errorf(CodeMissingParameter, "The request must contain the parameter resourceIdSet")
		}
		targets := make([]*map[string]string, 0, len(ids))
		for _, id := range ids {
			t, e := c.taggable(id, now)
			if e != nil {
				return e
			}
			targets = append(targets, t)
		}
		if dryRun {
			return dryRunError()
		}
		for _, t := range targets {
			if len(tags) == 0 {
				*t = nil
				continue
			}
			for _, d := range tags {
				if v, has := (*t)[d.Key]; has && (d.Value == nil || *d.Value == v) {
					delete(*t, d.Key)
				}
			}
		}
		c.markDirty()
		return nil
	})
}

// TagDescription is one tag of one resource, as DescribeTags lists it.
type TagDescription struct {
	ResourceID   string
	ResourceType string
	Key          string
	Value        string
}

// tagPaging are DescribeTags' MaxResults bounds.
var tagPaging = pageRules{min: 5, max: 1000}

// DescribeTags lists the tags of every resource, filtered by key, value,
// resource ID and resource type.
func (c *Cloud) DescribeTags(q Query) (Page[TagDescription], error) {
	var page Page[TagDescription]
	err := c.do(func(now time.Time) error {
		size, e := checkPaging(q, tagPaging)
		if e != nil {
			return e
		}
		var items []TagDescription
		add := func(id, typ string, tags map[string]string) {
			for k, v := range tags {
				items = append(items, TagDescription{ResourceID: id, ResourceType: typ, Key: k, Value: v})
			}
		}
		w := c.readWorld(now, q.Lag)
		for _, v := range w.volumes {
			if visible(v.CreateTime, now, q.Hide) {
				add(v.ID, "volume", v.Tags)
			}
		}
		for _, s := range w.snapshots {
			if visible(s.StartTime, now, q.Hide) {
				add(s.ID, "snapshot", s.Tags)
			}
		}
		for _, in := range c.st.Instances {
			add(in.ID, "instance", in.Tags)
		}
		items, e = filterItems(items, q.Filters, tagField, func(t TagDescription) map[string]string {
			return map[string]string{t.Key: t.Value}
		})
		if e != nil {
			return e
		}
		page, e = paginate(items, func(t TagDescription) string { return t.ResourceID + "\x00" + t.Key }, q, size)
		return asError(e)
	})
	return page, err
}

// tagField answers the DescribeTags filters.
func tagField(t TagDescription, name string) ([]string, bool) {
	switch name {
	case "key":
		return []string{t.Key}, true
	case "value":
		return []string{t.Value}, true
	case "resource-id":
		return []string{t.ResourceID}, true
	case "resource-type":
		return []string{t.ResourceType}, true
	}
	return nil, false
}
