package history_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/history"
	"github.com/fleetwatch/fleetwatch/persist"
	"github.com/fleetwatch/fleetwatch/search"
)

// The changes of Deployments in namespace shop of the prod clusters, and how one of them
// changed. A fleetwatch.Manager with a change log returns its Log (Manager.History);
// here a snapshot is written by hand.
func Example() {
	dir, _ := os.MkdirTemp("", "history")
	defer os.RemoveAll(dir)
	store, err := persist.Open(filepath.Join(dir, "fleetwatch.db"), persist.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	w := store.NewWriter(persist.WriterOptions{Interval: time.Hour, History: persist.HistoryOptions{Enabled: true}})
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	key := persist.ResourceKeyFor(gvr)
	for i, replicas := range []int64{2, 3} {
		d := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"namespace": "shop", "name": "payments"},
			"spec":     map[string]any{"replicas": replicas},
		}}
		w.Upsert("prod-east", key, d)
		w.Checkpoint("prod-east", key, fmt.Sprint(10+i))
		_ = w.Flush(context.Background())
	}

	log := history.New(store, history.Options{})
	q, _ := search.Parse("cluster:prod-* kind:Deployment ns:shop")
	page, err := log.Changes(history.ChangesRequest{Query: q, Kinds: map[schema.GroupVersionResource]string{gvr: "Deployment"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range page.Items {
		fmt.Println(c.Seq, c.Type, c.Cluster, c.Kind, c.Namespace+"/"+c.Name)
	}
	obj, _ := log.Object(history.ObjectRequest{Cluster: "prod-east", Resource: gvr, Namespace: "shop", Name: "payments"})
	last := obj.Steps[len(obj.Steps)-1]
	for _, f := range last.Fields {
		fmt.Println(last.Type, f.Path, f.Old, "->", f.New)
	}
	// Output:
	// 1 Added prod-east Deployment shop/payments
	// 2 Modified prod-east Deployment shop/payments
	// Modified .spec.replicas 2 -> 3
}
