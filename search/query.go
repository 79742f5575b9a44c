package search

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetwatch/fleetwatch/cluster"
)

// Bounds of a query, so that no client can make one expensive to parse or to answer.
const (
	// MaxQueryLen bounds the length of a query string, in bytes.
	MaxQueryLen = 4096
	// MaxTerms bounds the number of terms of a query, parameters included.
	MaxTerms = 32
)

// Query is a parsed search: every term must hold (AND). The zero Query matches every
// object.
type Query struct {
	// Names are name terms: a case-insensitive substring, or prefix.
	Names []TextTerm
	// Kinds are kinds or resource names, each matched as Index.Search says.
	Kinds []string
	// Namespaces are exact namespaces; "" is never one (cluster-scoped objects have none).
	Namespaces []string
	// Clusters are globs over cluster names, with the syntax of the config's
	// contexts.include (cluster.ValidateGlob).
	Clusters []string
	// Labels are label selectors.
	Labels []labels.Selector
	// Images are case-insensitive substrings of a container image of a Pod or of the pod
	// template of a workload.
	Images []string

	// terms are the terms in canonical form, for String.
	terms []string
	// clusterGlobs are Clusters compiled.
	clusterGlobs []cluster.Globs
}

// TextTerm is a substring, or a prefix, to look for.
type TextTerm struct {
	Value  string
	Prefix bool
}

// TermError is the error of a query whose term is bad. Term is the term as it was
// written (with its prefix, as "label:a=="), or, for a parameter, "name=value".
type TermError struct {
	Term string
	Err  error
}

func (e *TermError) Error() string { return fmt.Sprintf("term %q: %v", e.Term, e.Err) }
func (e *TermError) Unwrap() error { return e.Err }

func termError(term string, err error) error {
	return &TermError{Term: term, Err: fmt.Errorf("%w: %w", ErrBadQuery, err)}
}

// Parse parses a query: terms separated by spaces, all of which must hold.
//
//	word          the name contains word (case-insensitive)
//	word*         the name starts with word
//	kind:K        the kind (Deployment), or a resource name (deployments, deploy,
//	              deployments.apps, Deployment.apps), case-insensitive
//	ns:N          in namespace N (also namespace:N)
//	cluster:G     in a cluster whose name matches the glob G
//	label:S       labels match the selector S, as app=web,tier!=db (also l:S)
//	image:I       a container image contains I (Pods, and the pod templates of
//	              Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs)
//
// A query longer than MaxQueryLen or of more than MaxTerms terms is refused. The error
// is a *TermError naming the first bad term.
func Parse(q string) (*Query, error) {
	out := &Query{}
	if len(q) > MaxQueryLen {
		return nil, termError(q[:32]+"...", fmt.Errorf("the query is longer than %d bytes", MaxQueryLen))
	}
	for _, t := range strings.Fields(q) {
		prefix, value, ok := strings.Cut(t, ":")
		if !ok {
			prefix, value = "name", t
		}
		if err := out.add(t, prefix, value); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Add adds a term given apart from the query string, as a parameter: name, kind,
// namespace, cluster, labelSelector or image, with the value syntax of the matching term
// of Parse (a labelSelector may hold spaces).
func (q *Query) Add(param, value string) error {
	prefix := param
	switch param {
	case "labelSelector":
		prefix = "label"
	case "name", "kind", "namespace", "cluster", "image":
	default:
		return termError(param+"="+value, errors.New("not a search parameter"))
	}
	return q.add(param+"="+value, prefix, value)
}

func (q *Query) add(term, prefix, value string) error {
	if len(q.terms) == MaxTerms {
		return termError(term, fmt.Errorf("more than %d terms", MaxTerms))
	}
	if value == "" {
		return termError(term, errors.New("empty value"))
	}
	var canonical string
	switch prefix {
	case "name":
		tt := TextTerm{Value: strings.ToLower(value)}
		if v, ok := strings.CutSuffix(tt.Value, "*"); ok {
			tt = TextTerm{Value: v, Prefix: true}
		}
		if strings.Contains(tt.Value, "*") {
			return termError(term, errors.New("'*' is only allowed at the end of a name, for a prefix"))
		}
		q.Names = append(q.Names, tt)
		canonical = "name:" + tt.Value
		if tt.Prefix {
			canonical += "*"
		}
	case "kind":
		q.Kinds = append(q.Kinds, value)
		canonical = "kind:" + strings.ToLower(value)
	case "ns", "namespace":
		q.Namespaces = append(q.Namespaces, value)
		canonical = "ns:" + value
	case "cluster":
		g, err := cluster.CompileGlobs(value)
		if err != nil {
			return termError(term, err)
		}
		q.Clusters = append(q.Clusters, value)
		q.clusterGlobs = append(q.clusterGlobs, g)
		canonical = "cluster:" + value
	case "label", "l":
		sel, err := labels.Parse(value)
		if err != nil {
			return termError(term, err)
		}
		q.Labels = append(q.Labels, sel)
		canonical = "label:" + sel.String()
	case "image":
		q.Images = append(q.Images, strings.ToLower(value))
		canonical = "image:" + strings.ToLower(value)
	default:
		return termError(term, fmt.Errorf("unknown prefix %q: use kind:, ns:, namespace:, cluster:, label:, l: or image:", prefix))
	}
	q.terms = append(q.terms, canonical)
	return nil
}

// String is the query in a canonical form: equal queries give equal strings, whatever
// the order and spelling of their terms.
func (q *Query) String() string {
	terms := slices.Clone(q.terms)
	slices.Sort(terms)
	return strings.Join(terms, " ")
}
