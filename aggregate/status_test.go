package aggregate

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestStatusBoardNotSynced: NotSynced names the first clusters by name that are neither
// Synced nor watched by another replica, with their object counts, and counts them all
// and every cluster, as List would.
func TestStatusBoardNotSynced(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	b := NewStatusBoard(clocktesting.NewFakeClock(time.Now()), func(cluster string, _ schema.GroupVersionResource) int { return len(cluster) })
	phases := []Phase{PhaseSynced, PhaseSyncing, PhaseRemote, PhaseStale, PhaseMoving, PhaseConnecting}
	var want []string
	for i := range 60 {
		name := fmt.Sprintf("c-%02d", 59-i) // set in reverse order
		ph := phases[i%len(phases)]
		b.Set(ClusterStatus{Name: name, Phase: ph, Resources: []ResourceStatus{{Name: "pods", Resource: pods}}})
		if ph != PhaseSynced && ph != PhaseRemote && ph != PhaseMoving {
			want = append(want, name)
		}
	}
	slices.Sort(want)
	for _, limit := range []int{0, 1, 10, 100} {
		first, notSynced, all := b.NotSynced(limit)
		if all != 60 || notSynced != len(want) {
			t.Errorf("limit %d: %d not synced of %d, want %d of 60", limit, notSynced, all, len(want))
		}
		var got []string
		for _, st := range first {
			got = append(got, st.Name)
			if st.Resources[0].Count != len(st.Name) {
				t.Errorf("%s: count %d, want %d", st.Name, st.Resources[0].Count, len(st.Name))
			}
		}
		if w := want[:min(limit, len(want))]; !slices.Equal(got, w) {
			t.Errorf("limit %d: first %v, want %v", limit, got, w)
		}
	}
}
