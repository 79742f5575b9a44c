package persist_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/persist"
)

// A daemon opens the snapshot, logs a recovery if there was one, seeds its cache from
// the snapshot, and then feeds the Writer with the informers' changes and checkpoints.
func Example() {
	dir, _ := os.MkdirTemp("", "fleetwatch")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "fleetwatch.db")
	pods := persist.ResourceKeyFor(schema.GroupVersionResource{Version: "v1", Resource: "pods"})

	// First run: cold.
	store, err := persist.Open(path, persist.Options{})
	if err != nil {
		log.Fatal(err) // locked by another process, newer schema, permissions
	}
	w := store.NewWriter(persist.WriterOptions{})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Start(ctx) }()

	if err := store.SetIdentity("prod", persist.Identity{UID: "4f1c", Server: "https://prod.example.com"}); err != nil {
		log.Fatal(err)
	}
	pod := &unstructured.Unstructured{}
	pod.SetAPIVersion("v1")
	pod.SetKind("Pod")
	pod.SetNamespace("shop")
	pod.SetName("api-1")
	w.Upsert("prod", pods, pod)
	w.Checkpoint("prod", pods, "1042") // the informer's state at resourceVersion 1042

	// Shutdown: the Writer first (its last commit), then the Store.
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	store.Close()

	// Second run: warm.
	store, err = persist.Open(path, persist.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	snap, err := store.Load()
	if err != nil {
		log.Fatal(err)
	}
	if movedTo, cause := store.Recovered(); movedTo != "" {
		log.Printf("snapshot unreadable, moved to %s, starting cold: %v", movedTo, cause)
	}
	prod := snap.Clusters["prod"]
	fmt.Println("identity:", prod.Identity.Server)
	res := prod.Resources[pods]
	fmt.Println("resume pods at", res.ResourceVersion, "with", len(res.Objects), "object(s)")
	// Output:
	// identity: https://prod.example.com
	// resume pods at 1042 with 1 object(s)
}
