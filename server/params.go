package server

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// query selects the objects a list or watch returns.
type query struct {
	scope scope
	// namespace restricts to one namespace; "" is every namespace.
	namespace string
	// labels is the label selector; nil matches everything.
	labels labels.Selector
	// fields are the field selector's requirements, all of which must hold.
	fields []fieldRequirement
	// codec decodes the objects of a compact fleet's view (compactObject) for the
	// fields that their summary lacks.
	codec aggregate.Codec
}

type fieldRequirement struct {
	field, value string
	// equal is true for = and ==, false for !=.
	equal bool
	// path locates the field in an unstructured object, for fields other than
	// metadata.name and metadata.namespace.
	path []string
}

// matches reports whether obj is selected, apart from its cluster.
func (q *query) matches(obj runtime.Object) bool {
	if q.namespace == "" && q.labels == nil && len(q.fields) == 0 {
		return true
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	if q.namespace != "" && m.GetNamespace() != q.namespace {
		return false
	}
	if q.labels != nil && !q.labels.Matches(labelsOf(obj, m)) {
		return false
	}
	if co, ok := obj.(*compactObject); ok && q.needsFields() {
		obj = object{obj: co, codec: q.codec}.full().obj
		if m, err = meta.Accessor(obj); err != nil {
			return false
		}
	}
	for _, f := range q.fields {
		if (fieldValue(obj, m, f) == f.value) != f.equal {
			return false
		}
	}
	return true
}

// needsFields reports whether the field selector reads fields other than the name and
// namespace.
func (q *query) needsFields() bool {
	for _, f := range q.fields {
		if f.path != nil {
			return true
		}
	}
	return false
}

// withoutPaths returns q without the field requirements of fields other than the name
// and namespace.
func (q *query) withoutPaths() *query {
	c := *q
	c.fields = nil
	for _, f := range q.fields {
		if f.path == nil {
			c.fields = append(c.fields, f)
		}
	}
	return &c
}

// rawLabels reads the labels of an unstructured object in place, without the copy that
// Unstructured.GetLabels makes.
type rawLabels map[string]any

func (l rawLabels) Has(key string) bool { _, ok := l[key]; return ok }
func (l rawLabels) Get(key string) string {
	v, _ := l[key].(string)
	return v
}
func (l rawLabels) Lookup(key string) (string, bool) {
	v, ok := l[key]
	s, _ := v.(string)
	return s, ok
}

func labelsOf(obj runtime.Object, m metav1.Object) labels.Labels {
	if co, ok := obj.(*compactObject); ok {
		return co.labelSet()
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		md, _ := u.Object["metadata"].(map[string]any)
		l, _ := md["labels"].(map[string]any)
		return rawLabels(l)
	}
	return labels.Set(m.GetLabels())
}

func fieldValue(obj runtime.Object, m metav1.Object, f fieldRequirement) string {
	switch f.field {
	case "metadata.name":
		return m.GetName()
	case "metadata.namespace":
		return m.GetNamespace()
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return "" // metadata-only objects have no other fields
	}
	v, found, err := unstructured.NestedFieldNoCopy(u.Object, f.path...)
	if !found || err != nil {
		return ""
	}
	switch v := v.(type) {
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// selectableFields are the fields, beyond metadata.name and metadata.namespace, that a
// field selector may use, as the apiserver allows them, with their path in the object.
var selectableFields = map[schema.GroupResource]map[string][]string{
	{Resource: "pods"}: {
		"spec.nodeName":            {"spec", "nodeName"},
		"spec.restartPolicy":       {"spec", "restartPolicy"},
		"spec.schedulerName":       {"spec", "schedulerName"},
		"spec.serviceAccountName":  {"spec", "serviceAccountName"},
		"spec.hostNetwork":         {"spec", "hostNetwork"},
		"status.phase":             {"status", "phase"},
		"status.podIP":             {"status", "podIP"},
		"status.nominatedNodeName": {"status", "nominatedNodeName"},
	},
	{Resource: "events"}: {
		"involvedObject.kind":            {"involvedObject", "kind"},
		"involvedObject.namespace":       {"involvedObject", "namespace"},
		"involvedObject.name":            {"involvedObject", "name"},
		"involvedObject.uid":             {"involvedObject", "uid"},
		"involvedObject.apiVersion":      {"involvedObject", "apiVersion"},
		"involvedObject.resourceVersion": {"involvedObject", "resourceVersion"},
		"involvedObject.fieldPath":       {"involvedObject", "fieldPath"},
		"reason":                         {"reason"},
		"reportingComponent":             {"reportingComponent"},
		"source":                         {"source", "component"},
		"type":                           {"type"},
	},
	{Resource: "secrets"}:                    {"type": {"type"}},
	{Resource: "nodes"}:                      {"spec.unschedulable": {"spec", "unschedulable"}},
	{Resource: "namespaces"}:                 {"status.phase": {"status", "phase"}},
	{Resource: "replicationcontrollers"}:     {"status.replicas": {"status", "replicas"}},
	{Group: "apps", Resource: "replicasets"}: {"status.replicas": {"status", "replicas"}},
	{Group: "batch", Resource: "jobs"}:       {"status.successful": {"status", "successful"}},
}

// parseLabelSelector parses the labelSelector parameter; an empty one selects everything
// (nil).
func parseLabelSelector(s string) (labels.Selector, error) {
	if s == "" {
		return nil, nil
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, badParameter("labelSelector", err)
	}
	if sel.Empty() {
		return nil, nil
	}
	return sel, nil
}

// parseFieldSelector parses the fieldSelector parameter for resource gr.
func parseFieldSelector(s string, gr schema.GroupResource) ([]fieldRequirement, error) {
	if s == "" {
		return nil, nil
	}
	sel, err := fields.ParseSelector(s)
	if err != nil {
		return nil, badParameter("fieldSelector", err)
	}
	var out []fieldRequirement
	for _, r := range sel.Requirements() {
		f := fieldRequirement{field: r.Field, value: r.Value}
		switch r.Operator {
		case selection.Equals, selection.DoubleEquals:
			f.equal = true
		case selection.NotEquals:
		default:
			return nil, badParameter("fieldSelector", fmt.Errorf("operator %q is not supported: use =, == or !=", r.Operator))
		}
		if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
			path, ok := selectableFields[gr][r.Field]
			if !ok {
				return nil, badParameter("fieldSelector", fmt.Errorf("field label not supported: %s", r.Field))
			}
			f.path = path
		}
		out = append(out, f)
	}
	return out, nil
}

// listParams are the query parameters of a list or watch.
type listParams struct {
	labelSelector   string
	fieldSelector   string
	limit           int64
	continueToken   *continueToken
	resourceVersion string
	rvMatch         metav1.ResourceVersionMatch
	watch           bool
	bookmarks       bool
	// timeout is timeoutSeconds; 0 if not set.
	timeout time.Duration
	// sendInitialEvents is nil if not set.
	sendInitialEvents *bool
}

// parseListParams parses and checks the parameters of a list or watch, with the rules
// of the apiserver. forceWatch is set for a watch of one object by its path.
func parseListParams(q url.Values, forceWatch bool) (*listParams, error) {
	p := &listParams{
		labelSelector:   q.Get("labelSelector"),
		fieldSelector:   q.Get("fieldSelector"),
		resourceVersion: q.Get("resourceVersion"),
		rvMatch:         metav1.ResourceVersionMatch(q.Get("resourceVersionMatch")),
	}
	var err error
	if p.watch, err = parseBool(q, "watch"); err != nil {
		return nil, err
	}
	p.watch = p.watch || forceWatch
	if p.bookmarks, err = parseBool(q, "allowWatchBookmarks"); err != nil {
		return nil, err
	}
	if s := q.Get("limit"); s != "" {
		if p.limit, err = strconv.ParseInt(s, 10, 64); err != nil || p.limit < 0 {
			return nil, badParameter("limit", fmt.Errorf("%q is not a non-negative integer", s))
		}
	}
	if s := q.Get("timeoutSeconds"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || n > int64(365*24*time.Hour/time.Second) {
			return nil, badParameter("timeoutSeconds", fmt.Errorf("%q is not a number of seconds", s))
		}
		p.timeout = time.Duration(n) * time.Second
	}
	if s := q.Get("sendInitialEvents"); s != "" {
		b, err := parseBool(q, "sendInitialEvents")
		if err != nil {
			return nil, err
		}
		p.sendInitialEvents = &b
	}
	if s := q.Get("continue"); s != "" {
		t, err := parseContinue(s)
		if err != nil {
			return nil, badParameter("continue", err)
		}
		p.continueToken = &t
	}
	switch p.rvMatch {
	case "", metav1.ResourceVersionMatchNotOlderThan, metav1.ResourceVersionMatchExact:
	default:
		return nil, badParameter("resourceVersionMatch", fmt.Errorf("%q is not one of NotOlderThan, Exact", p.rvMatch))
	}
	if p.watch {
		if p.continueToken != nil {
			return nil, badParameter("continue", errors.New("not allowed in a watch"))
		}
		if p.sendInitialEvents != nil && p.rvMatch != metav1.ResourceVersionMatchNotOlderThan {
			return nil, badParameter("resourceVersionMatch", errors.New("must be NotOlderThan when sendInitialEvents is set"))
		}
		if p.sendInitialEvents == nil && p.rvMatch != "" {
			return nil, badParameter("resourceVersionMatch", errors.New("not allowed in a watch unless sendInitialEvents is set"))
		}
		return p, nil
	}
	if p.sendInitialEvents != nil {
		return nil, badParameter("sendInitialEvents", errors.New("only allowed in a watch"))
	}
	if p.continueToken != nil && p.resourceVersion != "" && p.resourceVersion != "0" {
		return nil, badParameter("resourceVersion", errors.New("not allowed with continue: the list continues at the resourceVersion of its first page"))
	}
	if p.rvMatch != "" && p.resourceVersion == "" {
		return nil, badParameter("resourceVersionMatch", errors.New("not allowed unless resourceVersion is set"))
	}
	if p.rvMatch == metav1.ResourceVersionMatchExact && p.resourceVersion == "0" {
		return nil, badParameter("resourceVersionMatch", errors.New("Exact is not allowed with resourceVersion 0"))
	}
	return p, nil
}

// parseBool parses a boolean parameter; absent is false.
func parseBool(q url.Values, name string) (bool, error) {
	s := q.Get(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, badParameter(name, fmt.Errorf("%q is not a boolean", s))
	}
	return b, nil
}

// tableOptions are the parameters of a Table response.
type tableOptions struct {
	includeObject metav1.IncludeObjectPolicy
}

func parseTableOptions(q url.Values) (tableOptions, error) {
	o := tableOptions{includeObject: metav1.IncludeObjectPolicy(q.Get("includeObject"))}
	switch o.includeObject {
	case "":
		o.includeObject = metav1.IncludeMetadata
	case metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject:
	default:
		return o, badParameter("includeObject", fmt.Errorf("%q is not one of None, Metadata, Object", o.includeObject))
	}
	return o, nil
}

// resolveResourceVersion interprets the resourceVersion parameter of a list or watch in
// scope sc: zero is "" or "0" (no cursor); a cursor of this server's watch cache; or, in
// the scope of one cluster, that cluster's own resourceVersion. foreign is set for a
// well-formed resourceVersion that cannot be compared with this watch cache's: a cursor
// of another epoch that wc does not accept, or a cluster's resourceVersion in the scope
// of every cluster.
func resolveResourceVersion(rv string, wc *watchCache, sc scope) (c cursor, zero, foreign bool, err error) {
	epoch := wc.epoch
	if rv == "" || rv == "0" {
		return cursor{}, true, false, nil
	}
	c, err = parseCursor(rv)
	switch {
	case errors.Is(err, errNotCursor):
		if sc.all() {
			return cursor{}, false, true, nil
		}
		v, _ := strconv.ParseUint(rv, 10, 64)
		return cursor{epoch: epoch, positions: map[string]position{sc.cluster: {rv: v}}, clusterRV: true}, false, false, nil
	case err != nil:
		return cursor{}, false, false, badParameter("resourceVersion", err)
	case !wc.acceptsCursor(c) || c.short && !wc.shortFor(sc):
		// A short cursor is not resumed by a client limited to some clusters, which is
		// not handed any: its cursors would count the changes of the others.
		return c, false, true, nil
	}
	return c, false, false, nil
}

// equalIn reports whether a and b have the same positions for the clusters of sc.
func equalIn(a, b cursor, sc scope) bool {
	for cl, p := range a.positions {
		if sc.includes(cl) && b.positions[cl] != p {
			return false
		}
	}
	for cl, p := range b.positions {
		if sc.includes(cl) && a.positions[cl] != p {
			return false
		}
	}
	return true
}
