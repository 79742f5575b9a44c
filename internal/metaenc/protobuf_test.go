package metaenc

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestProtobufWriterReset: a writer kept for later calls (package wire pools them)
// holds, once Reset, no view of the protobuf it read, and no scratch space that an
// object of many labels grew.
func TestProtobufWriterReset(t *testing.T) {
	labels := map[string]string{}
	for i := range 5000 {
		labels[fmt.Sprintf("k%d", i)] = "v"
	}
	raw, err := (&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "many", Labels: labels}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var w ProtobufWriter
	enc, ok := w.Write(raw, true)
	if !ok {
		t.Fatal("declined")
	}
	if got, err := Decode(enc); err != nil || got.Name != "many" || len(got.Labels) != len(labels) {
		t.Fatalf("decoded %d labels of %q, %v", len(got.Labels), got.Name, err)
	}
	if string(w.Name()) != "many" || w.NumLabels() != len(labels) {
		t.Fatalf("filed %q with %d labels", w.Name(), w.NumLabels())
	}
	w.Reset()
	if w.meta != nil || w.labels != nil {
		t.Errorf("after Reset: a view of %d bytes, scratch for %d labels", len(w.meta), cap(w.labels))
	}
	if _, ok := w.Write(raw[:len(raw)-1], true); ok {
		t.Error("truncated protobuf written")
	}
}
