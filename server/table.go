package server

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Server-side printing: kubectl asks for a meta.k8s.io/v1 Table and prints its columns.
// Every table starts with CLUSTER and NAME; kubectl adds NAMESPACE in front by itself
// for --all-namespaces, from the metadata of each row's object. Well-known kinds get the
// columns kubectl shows for them; others get AGE.

// column is a column of a table after CLUSTER and NAME.
type column struct {
	def  metav1.TableColumnDefinition
	cell func(u *unstructured.Unstructured, now time.Time) any
}

var tableGVK = metav1.SchemeGroupVersion.WithKind("Table")

var (
	clusterColumn = metav1.TableColumnDefinition{Name: "Cluster", Type: "string", Description: "The cluster the object lives in (annotation " + ClusterAnnotation + ")."}
	nameColumn    = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]}
	ageColumn     = column{
		def:  metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
		cell: func(u *unstructured.Unstructured, now time.Time) any { return age(u.GetCreationTimestamp(), now) },
	}
)

func stringColumn(name string, priority int32, f func(u *unstructured.Unstructured) string) column {
	return column{
		def:  metav1.TableColumnDefinition{Name: name, Type: "string", Priority: priority},
		cell: func(u *unstructured.Unstructured, _ time.Time) any { return f(u) },
	}
}

func intColumn(name string, path ...string) column {
	return column{
		def:  metav1.TableColumnDefinition{Name: name, Type: "integer"},
		cell: func(u *unstructured.Unstructured, _ time.Time) any { return nestedInt(u, path...) },
	}
}

// columnsByResource are the columns of well-known resources.
var columnsByResource = map[schema.GroupResource][]column{
	{Resource: "pods"}: {
		stringColumn("Ready", 0, podReady),
		stringColumn("Status", 0, podStatus),
		{
			def:  metav1.TableColumnDefinition{Name: "Restarts", Type: "integer"},
			cell: func(u *unstructured.Unstructured, _ time.Time) any { return podRestarts(u) },
		},
		ageColumn,
		stringColumn("IP", 1, func(u *unstructured.Unstructured) string { return orNone(nestedString(u, "status", "podIP")) }),
		stringColumn("Node", 1, func(u *unstructured.Unstructured) string { return orNone(nestedString(u, "spec", "nodeName")) }),
	},
	{Group: "apps", Resource: "deployments"}: {
		stringColumn("Ready", 0, func(u *unstructured.Unstructured) string {
			return fmt.Sprintf("%d/%d", nestedInt(u, "status", "readyReplicas"), replicas(u))
		}),
		intColumn("Up-to-date", "status", "updatedReplicas"),
		intColumn("Available", "status", "availableReplicas"),
		ageColumn,
		stringColumn("Containers", 1, func(u *unstructured.Unstructured) string { return containerField(u, "name") }),
		stringColumn("Images", 1, func(u *unstructured.Unstructured) string { return containerField(u, "image") }),
		stringColumn("Selector", 1, selector),
	},
	{Group: "apps", Resource: "statefulsets"}: {
		stringColumn("Ready", 0, func(u *unstructured.Unstructured) string {
			return fmt.Sprintf("%d/%d", nestedInt(u, "status", "readyReplicas"), replicas(u))
		}),
		ageColumn,
	},
	{Group: "apps", Resource: "replicasets"}: {
		{
			def:  metav1.TableColumnDefinition{Name: "Desired", Type: "integer"},
			cell: func(u *unstructured.Unstructured, _ time.Time) any { return replicas(u) },
		},
		intColumn("Current", "status", "replicas"),
		intColumn("Ready", "status", "readyReplicas"),
		ageColumn,
	},
	{Group: "apps", Resource: "daemonsets"}: {
		intColumn("Desired", "status", "desiredNumberScheduled"),
		intColumn("Current", "status", "currentNumberScheduled"),
		intColumn("Ready", "status", "numberReady"),
		intColumn("Up-to-date", "status", "updatedNumberScheduled"),
		intColumn("Available", "status", "numberAvailable"),
		ageColumn,
	},
	{Resource: "services"}: {
		stringColumn("Type", 0, func(u *unstructured.Unstructured) string { return nestedString(u, "spec", "type") }),
		stringColumn("Cluster-IP", 0, func(u *unstructured.Unstructured) string { return orNone(nestedString(u, "spec", "clusterIP")) }),
		stringColumn("External-IP", 0, externalIPs),
		stringColumn("Port(s)", 0, servicePorts),
		ageColumn,
	},
	{Resource: "nodes"}: {
		stringColumn("Status", 0, nodeStatus),
		stringColumn("Roles", 0, nodeRoles),
		ageColumn,
		stringColumn("Version", 0, func(u *unstructured.Unstructured) string {
			return nestedString(u, "status", "nodeInfo", "kubeletVersion")
		}),
	},
	{Resource: "namespaces"}: {
		stringColumn("Status", 0, func(u *unstructured.Unstructured) string { return nestedString(u, "status", "phase") }),
		ageColumn,
	},
	{Resource: "configmaps"}: {
		{
			def: metav1.TableColumnDefinition{Name: "Data", Type: "integer"},
			cell: func(u *unstructured.Unstructured, _ time.Time) any {
				return int64(nestedLen(u, "data") + nestedLen(u, "binaryData"))
			},
		},
		ageColumn,
	},
	{Resource: "secrets"}: {
		stringColumn("Type", 0, func(u *unstructured.Unstructured) string { return nestedString(u, "type") }),
		{
			def:  metav1.TableColumnDefinition{Name: "Data", Type: "integer"},
			cell: func(u *unstructured.Unstructured, _ time.Time) any { return int64(nestedLen(u, "data")) },
		},
		ageColumn,
	},
}

// columnsFor returns the columns of a resource after CLUSTER and NAME. Resources cached
// metadata-only have no fields to show beyond AGE.
func columnsFor(gr schema.GroupResource, metadataOnly bool) []column {
	if cols, ok := columnsByResource[gr]; ok && !metadataOnly {
		return cols
	}
	return []column{ageColumn}
}

// table returns objs as a Table. headers says whether to include the column definitions;
// a watch sends them with its first event only, as the apiserver does. rv, if not empty,
// is the resourceVersion of each row's object (watch events).
func (s *Server) table(ctx context.Context, res *apiResource, objs []object, opts tableOptions, lm metav1.ListMeta, headers bool, rv string) *metav1.Table {
	return s.printer(ctx, res, objs, opts).rows(objs, lm, headers, rv)
}

// rows returns objs as a Table, as Server.table, with the columns of p.
func (p *tablePrinter) rows(objs []object, lm metav1.ListMeta, headers bool, rv string) *metav1.Table {
	t := p.table(lm, headers)
	for _, o := range objs {
		t.Rows = append(t.Rows, p.row(o, rv))
	}
	return t
}

// tablePrinter prints objects of a resource as the rows of a Table, one at a time, so
// that a list can stream its rows (see writeList).
type tablePrinter struct {
	res  *apiResource
	cols []column
	opts tableOptions
	now  time.Time
}

// printer returns the printer of objs, all of resource res. The columns of a custom
// resource are those of its CRD in the first cluster of objs that has one it can read
// (crdcolumns.go), which it may ask for: no lock may be held.
func (s *Server) printer(ctx context.Context, res *apiResource, objs []object, opts tableOptions) *tablePrinter {
	var clusters []string
	for _, o := range objs {
		if !slices.Contains(clusters, o.cluster) {
			clusters = append(clusters, o.cluster)
		}
	}
	metadataOnly := slices.ContainsFunc(objs, func(o object) bool {
		switch o.obj.(type) {
		case *unstructured.Unstructured, *compactObject:
			return false
		}
		return true
	})
	return s.printerIn(ctx, res, clusters, metadataOnly, opts)
}

// printerIn returns the printer of objects of res in clusters, in order of preference
// for the CRD that gives the columns of a custom resource.
func (s *Server) printerIn(ctx context.Context, res *apiResource, clusters []string, metadataOnly bool, opts tableOptions) *tablePrinter {
	if rc := s.cache.lookup(res.gvr); rc != nil {
		metadataOnly = metadataOnly || rc.isMetadataOnly()
	}
	cols := columnsFor(res.gvr.GroupResource(), metadataOnly)
	if _, known := columnsByResource[res.gvr.GroupResource()]; !known && !metadataOnly && mayBeCustom(res.gvr) {
		if pcs, ok := s.crdPrinterColumns(ctx, res.gvr, clusters); ok {
			cols = columnsOfCRD(pcs)
		}
	}
	return &tablePrinter{res: res, cols: cols, opts: opts, now: s.clock.Now()}
}

// table returns a Table without rows (an empty slice, not nil), and with the column
// definitions if headers is set.
func (p *tablePrinter) table(lm metav1.ListMeta, headers bool) *metav1.Table {
	t := &metav1.Table{
		TypeMeta: metav1.TypeMeta{Kind: tableGVK.Kind, APIVersion: tableGVK.GroupVersion().String()},
		ListMeta: lm,
		Rows:     []metav1.TableRow{},
	}
	if headers {
		t.ColumnDefinitions = []metav1.TableColumnDefinition{clusterColumn, nameColumn}
		for _, c := range p.cols {
			t.ColumnDefinitions = append(t.ColumnDefinitions, c.def)
		}
	}
	return t
}

// row returns the row of o; rv, if not empty, is the resourceVersion of its object.
func (p *tablePrinter) row(o object, rv string) metav1.TableRow {
	o = o.full()
	m := mustAccessor(o.obj)
	row := metav1.TableRow{Cells: make([]any, 0, 2+len(p.cols))}
	row.Cells = append(row.Cells, o.cluster, m.GetName())
	u, _ := o.obj.(*unstructured.Unstructured)
	for _, c := range p.cols {
		switch {
		case u != nil:
			row.Cells = append(row.Cells, c.cell(u, p.now))
		case c.def.Name == ageColumn.def.Name:
			row.Cells = append(row.Cells, age(m.GetCreationTimestamp(), p.now))
		default:
			row.Cells = append(row.Cells, "")
		}
	}
	switch p.opts.includeObject {
	case metav1.IncludeObject:
		row.Object.Object = served(p.res, o, rv)
	case metav1.IncludeMetadata:
		row.Object.Object = partial(o, rv)
	}
	return row
}

// clustersTable returns Clusters as a Table.
func (s *Server) clustersTable(items []Cluster, opts tableOptions) *metav1.Table {
	t := &metav1.Table{
		TypeMeta: metav1.TypeMeta{Kind: tableGVK.Kind, APIVersion: tableGVK.GroupVersion().String()},
		ColumnDefinitions: []metav1.TableColumnDefinition{
			nameColumn,
			{Name: "Phase", Type: "string", Description: "Connecting, Syncing, Synced, Unreachable, Stale, or, in a sharded fleet, Remote or Moving."},
			{Name: "Server", Type: "string", Description: "The URL of the cluster's API server."},
			{Name: "Objects", Type: "integer", Description: "The number of cached objects."},
			{Name: "Resources", Type: "string", Description: "Synced resources, of those configured."},
			{Name: "Last Sync", Type: "string", Description: "Time since the cluster last completed its initial sync."},
			{Name: "Error", Type: "string", Priority: 1, Description: "The cluster's most recent error."},
			{Name: "Replica", Type: "string", Priority: 1, Description: "The replica of a sharded fleet that watches the cluster."},
		},
		Rows: make([]metav1.TableRow, 0, len(items)),
	}
	now := s.clock.Now()
	for i := range items {
		c := &items[i]
		synced := 0
		for _, r := range c.Status.Resources {
			if r.State == "Synced" {
				synced++
			}
		}
		lastSync := "<never>"
		if c.Status.LastSyncTime != nil {
			lastSync = age(*c.Status.LastSyncTime, now)
		}
		row := metav1.TableRow{Cells: []any{
			c.Name, c.Status.Phase, c.Status.Server, int64(c.Status.Objects),
			fmt.Sprintf("%d/%d", synced, len(c.Status.Resources)), lastSync, orNone(c.Status.LastError), orNone(c.Status.Replica),
		}}
		switch opts.includeObject {
		case metav1.IncludeObject:
			row.Object.Object = c
		case metav1.IncludeMetadata:
			row.Object.Object = &metav1.PartialObjectMetadata{
				TypeMeta:   metav1.TypeMeta{Kind: partialGVK.Kind, APIVersion: partialGVK.GroupVersion().String()},
				ObjectMeta: c.ObjectMeta,
			}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func mustAccessor(obj runtime.Object) metav1.Object {
	m, err := meta.Accessor(obj)
	if err != nil {
		return &metav1.ObjectMeta{}
	}
	return m
}

func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func nestedString(u *unstructured.Unstructured, path ...string) string {
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	s, _ := v.(string)
	return s
}

func nestedInt(u *unstructured.Unstructured, path ...string) int64 {
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	switch v := v.(type) {
	case int64:
		return v
	case float64:
		return int64(v)
	}
	return 0
}

func nestedLen(u *unstructured.Unstructured, path ...string) int {
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	m, _ := v.(map[string]any)
	return len(m)
}

func nestedSlice(m map[string]any, path ...string) []any {
	v, _, _ := unstructured.NestedFieldNoCopy(m, path...)
	s, _ := v.([]any)
	return s
}

func replicas(u *unstructured.Unstructured) int64 {
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "replicas"); !found {
		return 1
	}
	return nestedInt(u, "spec", "replicas")
}

func podReady(u *unstructured.Unstructured) string {
	total := len(nestedSlice(u.Object, "spec", "containers"))
	ready := 0
	for _, cs := range nestedSlice(u.Object, "status", "containerStatuses") {
		if m, _ := cs.(map[string]any); m != nil && m["ready"] == true {
			ready++
		}
	}
	return fmt.Sprintf("%d/%d", ready, total)
}

func podRestarts(u *unstructured.Unstructured) int64 {
	var n int64
	for _, cs := range nestedSlice(u.Object, "status", "containerStatuses") {
		if m, _ := cs.(map[string]any); m != nil {
			n += nestedInt(&unstructured.Unstructured{Object: m}, "restartCount")
		}
	}
	return n
}

// podStatus is kubectl's STATUS of a pod.
func podStatus(u *unstructured.Unstructured) string {
	reason := nestedString(u, "status", "phase")
	if r := nestedString(u, "status", "reason"); r != "" {
		reason = r
	}
	if r, initializing := initStatus(u); initializing {
		reason = r
	} else {
		running := false
		css := nestedSlice(u.Object, "status", "containerStatuses")
		for i := len(css) - 1; i >= 0; i-- {
			m, _ := css[i].(map[string]any)
			c := &unstructured.Unstructured{Object: m}
			switch {
			case nestedString(c, "state", "waiting", "reason") != "":
				reason = nestedString(c, "state", "waiting", "reason")
			case nestedString(c, "state", "terminated", "reason") != "":
				reason = nestedString(c, "state", "terminated", "reason")
			case hasField(m, "state", "terminated"):
				reason = exitReason("", c)
			case m["ready"] == true && hasField(m, "state", "running"):
				running = true
			}
		}
		if reason == "Completed" && running {
			reason = "Running"
		}
	}
	if u.GetDeletionTimestamp() != nil {
		if nestedString(u, "status", "reason") == "NodeLost" {
			return "Unknown"
		}
		return "Terminating"
	}
	return reason
}

// initStatus returns the STATUS of a pod whose init containers are not done.
func initStatus(u *unstructured.Unstructured) (string, bool) {
	specs := nestedSlice(u.Object, "spec", "initContainers")
	for i, cs := range nestedSlice(u.Object, "status", "initContainerStatuses") {
		m, _ := cs.(map[string]any)
		c := &unstructured.Unstructured{Object: m}
		sidecar := false
		if i < len(specs) {
			spec, _ := specs[i].(map[string]any)
			sidecar = spec["restartPolicy"] == "Always"
		}
		switch {
		case hasField(m, "state", "terminated") && nestedInt(c, "state", "terminated", "exitCode") == 0:
			continue
		case sidecar && m["started"] == true:
			continue
		case hasField(m, "state", "terminated"):
			if r := nestedString(c, "state", "terminated", "reason"); r != "" {
				return "Init:" + r, true
			}
			return exitReason("Init:", c), true
		case nestedString(c, "state", "waiting", "reason") != "" && nestedString(c, "state", "waiting", "reason") != "PodInitializing":
			return "Init:" + nestedString(c, "state", "waiting", "reason"), true
		default:
			return fmt.Sprintf("Init:%d/%d", i, len(specs)), true
		}
	}
	return "", false
}

func exitReason(prefix string, c *unstructured.Unstructured) string {
	if sig := nestedInt(c, "state", "terminated", "signal"); sig != 0 {
		return fmt.Sprintf("%sSignal:%d", prefix, sig)
	}
	return fmt.Sprintf("%sExitCode:%d", prefix, nestedInt(c, "state", "terminated", "exitCode"))
}

func hasField(m map[string]any, path ...string) bool {
	_, found, _ := unstructured.NestedFieldNoCopy(m, path...)
	return found
}

func containerField(u *unstructured.Unstructured, field string) string {
	var out []string
	for _, c := range nestedSlice(u.Object, "spec", "template", "spec", "containers") {
		if m, _ := c.(map[string]any); m != nil {
			s, _ := m[field].(string)
			out = append(out, s)
		}
	}
	return strings.Join(out, ",")
}

func selector(u *unstructured.Unstructured) string {
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "selector")
	m, _ := v.(map[string]any)
	if m == nil {
		return "<none>"
	}
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ls); err != nil {
		return "<invalid>"
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		return "<invalid>"
	}
	return orNone(sel.String())
}

func externalIPs(u *unstructured.Unstructured) string {
	var ips []string
	for _, ing := range nestedSlice(u.Object, "status", "loadBalancer", "ingress") {
		if m, _ := ing.(map[string]any); m != nil {
			if ip, _ := m["ip"].(string); ip != "" {
				ips = append(ips, ip)
			} else if h, _ := m["hostname"].(string); h != "" {
				ips = append(ips, h)
			}
		}
	}
	for _, ip := range nestedSlice(u.Object, "spec", "externalIPs") {
		if s, _ := ip.(string); s != "" {
			ips = append(ips, s)
		}
	}
	if len(ips) == 0 && nestedString(u, "spec", "type") == "LoadBalancer" {
		return "<pending>"
	}
	return orNone(strings.Join(ips, ","))
}

func servicePorts(u *unstructured.Unstructured) string {
	var out []string
	for _, p := range nestedSlice(u.Object, "spec", "ports") {
		m, _ := p.(map[string]any)
		pu := &unstructured.Unstructured{Object: m}
		proto := nestedString(pu, "protocol")
		if proto == "" {
			proto = "TCP"
		}
		s := strconv.FormatInt(nestedInt(pu, "port"), 10)
		if np := nestedInt(pu, "nodePort"); np != 0 {
			s += ":" + strconv.FormatInt(np, 10)
		}
		out = append(out, s+"/"+proto)
	}
	return orNone(strings.Join(out, ","))
}

func nodeStatus(u *unstructured.Unstructured) string {
	status := "Unknown"
	for _, c := range nestedSlice(u.Object, "status", "conditions") {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			switch m["status"] {
			case "True":
				status = "Ready"
			case "False":
				status = "NotReady"
			}
		}
	}
	if v, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "unschedulable"); v == true {
		status += ",SchedulingDisabled"
	}
	return status
}

func nodeRoles(u *unstructured.Unstructured) string {
	var roles []string
	for k, v := range u.GetLabels() {
		switch {
		case strings.HasPrefix(k, "node-role.kubernetes.io/"):
			if r := strings.TrimPrefix(k, "node-role.kubernetes.io/"); r != "" {
				roles = append(roles, r)
			}
		case k == "kubernetes.io/role" && v != "":
			roles = append(roles, v)
		}
	}
	slices.Sort(roles)
	return orNone(strings.Join(slices.Compact(roles), ","))
}
