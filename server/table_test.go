package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const acceptTable = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

// decodedTable is a Table whose row objects are decoded.
type decodedTable struct {
	metav1.TypeMeta
	metav1.ListMeta   `json:"metadata"`
	ColumnDefinitions []metav1.TableColumnDefinition `json:"columnDefinitions"`
	Rows              []struct {
		Cells  []any           `json:"cells"`
		Object json.RawMessage `json:"object"`
	} `json:"rows"`
}

func (t decodedTable) columns() []string {
	var out []string
	for _, c := range t.ColumnDefinitions {
		if c.Priority == 0 {
			out = append(out, c.Name)
		}
	}
	return out
}

func (t decodedTable) cells(i int) []any { return t.Rows[i].Cells[:len(t.columns())] }

func TestTable(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		name, path string
		columns    []string
		rows       [][]any
	}{
		{
			"pods", clusterPath(allClusters) + "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb",
			[]string{"Cluster", "Name", "Ready", "Status", "Restarts", "Age"},
			[][]any{
				{edge, "web-3", "1/1", "Running", 2.0, "60m"},
				{prod, "web-1", "1/1", "Running", 2.0, "60m"},
				{prod, "web-2", "1/1", "Running", 2.0, "60m"},
				{staging, "web-1", "1/1", "Running", 2.0, "60m"},
			},
		},
		{
			"deployments", clusterPath(prod) + "/apis/apps/v1/deployments",
			[]string{"Cluster", "Name", "Ready", "Up-to-date", "Available", "Age"},
			[][]any{{prod, "web", "2/2", 2.0, 2.0, "120m"}},
		},
		{
			"nodes", clusterPath(allClusters) + "/api/v1/nodes",
			[]string{"Cluster", "Name", "Status", "Roles", "Age", "Version"},
			[][]any{{prod, "node-1", "Ready", "control-plane", "2d", "v1.33.1"}, {staging, "node-1", "Ready", "control-plane", "2d", "v1.33.1"}},
		},
		{
			"get", clusterPath(prod) + "/api/v1/namespaces/kube-system/pods/dns-1",
			[]string{"Cluster", "Name", "Ready", "Status", "Restarts", "Age"},
			[][]any{{prod, "dns-1", "1/1", "Running", 2.0, "60m"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tab decodedTable
			f.getOK(tc.path, &tab, "Accept", acceptTable)
			if tab.Kind != "Table" || tab.APIVersion != "meta.k8s.io/v1" {
				t.Errorf("kind %s %s", tab.APIVersion, tab.Kind)
			}
			if !slices.Equal(tab.columns(), tc.columns) {
				t.Errorf("columns %q, want %q", tab.columns(), tc.columns)
			}
			if len(tab.Rows) != len(tc.rows) {
				t.Fatalf("%d rows, want %d", len(tab.Rows), len(tc.rows))
			}
			for i, want := range tc.rows {
				if got := tab.cells(i); mustJSON(got) != mustJSON(want) {
					t.Errorf("row %d = %v, want %v", i, got, want)
				}
				var obj metav1.PartialObjectMetadata
				if err := json.Unmarshal(tab.Rows[i].Object, &obj); err != nil {
					t.Fatal(err)
				}
				if obj.Kind != "PartialObjectMetadata" || obj.Name != want[1] || obj.Annotations[ClusterAnnotation] != want[0] {
					t.Errorf("row %d object %s", i, tab.Rows[i].Object)
				}
			}
		})
	}

	t.Run("list resourceVersion", func(t *testing.T) {
		// kubectl get -w watches from the resourceVersion of the Table.
		var tab decodedTable
		f.getOK(clusterPath(allClusters)+"/api/v1/pods", &tab, "Accept", acceptTable)
		if _, err := parseCursor(tab.ResourceVersion); err != nil {
			t.Errorf("table resourceVersion %q: %v", tab.ResourceVersion, err)
		}
	})

	t.Run("includeObject", func(t *testing.T) {
		var tab decodedTable
		f.getOK(clusterPath(prod)+"/api/v1/namespaces/kube-system/pods?includeObject=Object", &tab, "Accept", acceptTable)
		var u unstructured.Unstructured
		if err := json.Unmarshal(tab.Rows[0].Object, &u.Object); err != nil {
			t.Fatal(err)
		}
		if u.GetKind() != "Pod" || u.GetAnnotations()[ClusterAnnotation] != prod {
			t.Errorf("object %v", u.Object)
		}
		f.getOK(clusterPath(prod)+"/api/v1/namespaces/kube-system/pods?includeObject=None", &tab, "Accept", acceptTable)
		if string(tab.Rows[0].Object) != "null" {
			t.Errorf("object %s, want none", tab.Rows[0].Object)
		}
		st := f.get(clusterPath(prod)+"/api/v1/pods?includeObject=All", "Accept", acceptTable).status(t, http.StatusBadRequest)
		if st.Details.Causes[0].Field != "includeObject" {
			t.Errorf("Status %+v", st)
		}
	})

	t.Run("wide columns", func(t *testing.T) {
		var tab decodedTable
		f.getOK(clusterPath(prod)+"/api/v1/namespaces/kube-system/pods", &tab, "Accept", acceptTable)
		if got := tab.Rows[0].Cells[len(tab.columns()):]; mustJSON(got) != `["10.0.0.1","node-1"]` {
			t.Errorf("wide cells %v", got)
		}
	})
}

func TestPodStatus(t *testing.T) {
	deleted := metav1.NewTime(now)
	for _, tc := range []struct {
		name   string
		status map[string]any
		spec   map[string]any
		del    bool
		want   string
	}{
		{"running", map[string]any{"phase": "Running", "containerStatuses": []any{
			map[string]any{"ready": true, "state": map[string]any{"running": map[string]any{}}}}}, nil, false, "Running"},
		{"pending", map[string]any{"phase": "Pending"}, nil, false, "Pending"},
		{"crash loop", map[string]any{"phase": "Running", "containerStatuses": []any{
			map[string]any{"state": map[string]any{"waiting": map[string]any{"reason": "CrashLoopBackOff"}}}}}, nil, false, "CrashLoopBackOff"},
		{"completed", map[string]any{"phase": "Succeeded", "containerStatuses": []any{
			map[string]any{"state": map[string]any{"terminated": map[string]any{"reason": "Completed", "exitCode": int64(0)}}}}}, nil, false, "Completed"},
		{"killed", map[string]any{"phase": "Failed", "containerStatuses": []any{
			map[string]any{"state": map[string]any{"terminated": map[string]any{"signal": int64(9)}}}}}, nil, false, "Signal:9"},
		{"exit code", map[string]any{"phase": "Failed", "containerStatuses": []any{
			map[string]any{"state": map[string]any{"terminated": map[string]any{"exitCode": int64(3)}}}}}, nil, false, "ExitCode:3"},
		{"evicted", map[string]any{"phase": "Failed", "reason": "Evicted"}, nil, false, "Evicted"},
		{"init running", map[string]any{"phase": "Pending", "initContainerStatuses": []any{
			map[string]any{"state": map[string]any{"terminated": map[string]any{"exitCode": int64(0)}}},
			map[string]any{"state": map[string]any{"running": map[string]any{}}}}},
			map[string]any{"initContainers": []any{map[string]any{}, map[string]any{}}}, false, "Init:1/2"},
		{"init failing", map[string]any{"phase": "Pending", "initContainerStatuses": []any{
			map[string]any{"state": map[string]any{"waiting": map[string]any{"reason": "ImagePullBackOff"}}}}},
			map[string]any{"initContainers": []any{map[string]any{}}}, false, "Init:ImagePullBackOff"},
		{"sidecar started", map[string]any{"phase": "Running", "initContainerStatuses": []any{
			map[string]any{"started": true, "state": map[string]any{"running": map[string]any{}}}}},
			map[string]any{"initContainers": []any{map[string]any{"restartPolicy": "Always"}}}, false, "Running"},
		{"terminating", map[string]any{"phase": "Running"}, nil, true, "Terminating"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{"status": tc.status}}
			if tc.spec != nil {
				u.Object["spec"] = tc.spec
			}
			if tc.del {
				u.SetDeletionTimestamp(&deleted)
			}
			if got := podStatus(u); got != tc.want {
				t.Errorf("podStatus = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTableColumns(t *testing.T) {
	svc := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"type": "LoadBalancer", "clusterIP": "10.96.0.10", "ports": []any{
			map[string]any{"port": int64(80), "protocol": "TCP"},
			map[string]any{"port": int64(53), "protocol": "UDP", "nodePort": int64(30053)},
		}},
		"status": map[string]any{"loadBalancer": map[string]any{"ingress": []any{map[string]any{"hostname": "lb.example.com"}}}},
	}}
	if got := servicePorts(svc); got != "80/TCP,53:30053/UDP" {
		t.Errorf("ports %q", got)
	}
	if got := externalIPs(svc); got != "lb.example.com" {
		t.Errorf("external IPs %q", got)
	}
	delete(svc.Object, "status")
	if got := externalIPs(svc); got != "<pending>" {
		t.Errorf("external IPs of a pending load balancer %q", got)
	}
	n := node("n", "1")
	_ = unstructured.SetNestedField(n.Object, true, "spec", "unschedulable")
	if got := nodeStatus(n); got != "Ready,SchedulingDisabled" {
		t.Errorf("node status %q", got)
	}
	d := deployment("ns", "d", "1", 3, 1)
	if got := selector(d); got != "app=d" {
		t.Errorf("selector %q", got)
	}
	if got := age(metav1.NewTime(now.Add(-90*time.Second)), now); got != "90s" {
		t.Errorf("age %q", got)
	}
	if got := age(metav1.Time{}, now); got != "<unknown>" {
		t.Errorf("age of nothing %q", got)
	}
}
