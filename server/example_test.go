package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/server"
)

// source is a minimal server.Source; the daemon uses a *fleetwatch.Manager.
type source struct{ fleet *aggregate.Fleet }

var pods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func (s source) Fleet() *aggregate.Fleet { return s.fleet }
func (s source) Ready() bool             { return true }
func (s source) Status() []aggregate.ClusterStatus {
	st, _ := s.ClusterStatus("prod")
	return []aggregate.ClusterStatus{st}
}
func (s source) ClusterStatus(name string) (aggregate.ClusterStatus, bool) {
	return aggregate.ClusterStatus{Name: name, Phase: aggregate.PhaseSynced, Resources: []aggregate.ResourceStatus{{
		Name: "pods", Resource: pods, Kind: pods.GroupVersion().WithKind("Pod"), Namespaced: true, State: "Synced",
	}}}, name == "prod"
}

// Serve a fleet and list the pods of every cluster, as kubectl --server
// http://127.0.0.1:8080/clusters/'*' get pods -A does.
func Example() {
	fleet := aggregate.New(aggregate.Options{})
	_ = fleet.ClusterStore("prod", pods).Apply(aggregatetest.Pod("default", "web-1", "7", nil), true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = fleet.Start(ctx) }()

	s, err := server.New(source{fleet}, server.Options{})
	if err != nil {
		panic(err)
	}
	// In the daemon: go s.Start(ctx), which listens on Options.Address.
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	res, err := http.Get(ts.URL + "/clusters/*/api/v1/pods")
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	var list unstructured.UnstructuredList
	if err := json.NewDecoder(res.Body).Decode(&list.Object); err != nil {
		panic(err)
	}
	for _, item := range list.Object["items"].([]any) {
		pod := unstructured.Unstructured{Object: item.(map[string]any)}
		fmt.Println(list.Object["kind"], pod.GetAnnotations()[server.ClusterAnnotation], pod.GetNamespace(), pod.GetName())
	}
	// Output: PodList prod default web-1
}
