package history

import (
	"encoding/json"
	"runtime/debug"
	"testing"

	"github.com/fleetwatch/fleetwatch/search"
)

// TestAnswersHoldNoMappedMemory reads the changes through every path that filters
// records where they lie in the file (the index of a few clusters, the whole log,
// kind, name and label terms, Allow), and an object's history, then closes the store,
// which unmaps the file: every string of the answers must still read. A field that
// aliased the file's map (persist hands Filter and Allow the file's bytes) faults.
func TestAnswersHoldNoMappedMemory(t *testing.T) {
	l, store, _ := testLog(t)
	var answers []any
	for _, q := range []string{"", "cluster:prod-east", "cluster:prod-*", "kind:Deployment ns:shop payments", "label:app=payments", "image:pay:2"} {
		query, err := search.Parse(q)
		if err != nil {
			t.Fatal(err)
		}
		allowed := func(c string) bool { return c != "dev" }
		items := allChanges(t, l, ChangesRequest{Query: query, Kinds: kinds, ShortNames: short, Allow: allowed, Limit: 2})
		if len(items) == 0 {
			t.Fatalf("%q: no changes", q)
		}
		answers = append(answers, items)
	}
	page, err := l.Object(ObjectRequest{Cluster: "prod-east", Resource: deploymentsGVR, Namespace: "shop", Name: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	answers = append(answers, page)
	want, err := json.Marshal(answers)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("an answer points into the file's map: %v", r)
		}
	}()
	got, err := json.Marshal(answers)
	if err != nil || string(got) != string(want) {
		t.Fatalf("the answers changed once the file was closed: %v\n got %s\nwant %s", err, got, want)
	}
}
