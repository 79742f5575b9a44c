package search

import (
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Matching a Query outside an Index: against what names one object, resource or cluster
// at a time, such as the records of the snapshot's change log (package history). The
// terms mean what they mean to Index.Search.

// MatchCluster reports whether a cluster matches every cluster term of q.
func (q *Query) MatchCluster(name string) bool {
	for _, g := range q.clusterGlobs {
		if !g.Match(name) {
			return false
		}
	}
	return true
}

// MatchKind reports whether a resource matches every kind term of q. kind is its kind,
// "" if not known (then the terms match its resource names only), and shortNames its
// short names.
func (q *Query) MatchKind(gvr schema.GroupVersionResource, kind string, shortNames []string) bool {
	for _, k := range q.Kinds {
		if !kindMatches(k, gvr, kind, shortNames) {
			return false
		}
	}
	return true
}

// NeedsObject reports whether q has terms that read an object's contents (label and
// image terms), which MatchObject needs the object for.
func (q *Query) NeedsObject() bool { return len(q.Labels) > 0 || len(q.Images) > 0 }

// MatchObject reports whether an object of resource gr matches every name, namespace,
// label and image term of q. obj may be nil when it is not known: then a label or image
// term does not hold.
func (q *Query) MatchObject(gr schema.GroupResource, namespace, name string, obj runtime.Object) bool {
	for _, ns := range q.Namespaces {
		if ns != namespace {
			return false
		}
	}
	if len(q.Names) > 0 {
		n := lower(name)
		for _, t := range q.Names {
			if !t.matches(n) {
				return false
			}
		}
	}
	if !q.NeedsObject() {
		return true
	}
	if obj == nil {
		return false
	}
	if len(q.Labels) > 0 {
		set := labels.Set(labelsOf(obj))
		for _, sel := range q.Labels {
			if !sel.Matches(set) {
				return false
			}
		}
	}
	if len(q.Images) > 0 {
		images := Images(gr, obj)
		for _, want := range q.Images {
			found := false
			for _, img := range images {
				if strings.Contains(lower(img), want) {
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
	}
	return true
}

// matches reports whether text, in lower case, holds the term: starts with it for a
// prefix, else contains it.
func (t TextTerm) matches(text string) bool {
	if t.Prefix {
		return strings.HasPrefix(text, t.Value)
	}
	return strings.Contains(text, t.Value)
}

// kindMatches reports whether a kind term names a resource: its kind, its resource
// name, singular name or a short name, each alone or followed by .group (the resource
// name also by .version.group), without regard to case.
func kindMatches(term string, gvr schema.GroupVersionResource, kind string, shortNames []string) bool {
	names := []string{kind, gvr.Resource, strings.ToLower(kind)}
	names = append(names, shortNames...)
	for _, n := range names {
		if n == "" {
			continue
		}
		if strings.EqualFold(term, n) {
			return true
		}
		if gvr.Group != "" && strings.EqualFold(term, n+"."+gvr.Group) {
			return true
		}
	}
	return strings.EqualFold(term, gvr.Resource+"."+gvr.Version+"."+gvr.Group) ||
		gvr.Group == "" && strings.EqualFold(term, gvr.Resource+"."+gvr.Version)
}
