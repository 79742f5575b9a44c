package e2e

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetwatch/fleetwatch/shard"
)

// TestShardedStartTogether starts three replicas of the real binary at the same instant
// over six members, as a fresh install or a full restart of the StatefulSet
// (podManagementPolicy Parallel) does, with shard.replicas 3. Each member's configmaps
// are handed out once, as its apiserver's list figures count them (lists and initial
// events), every watch of them that it served was its owner's, and each was taken once,
// by its owner, as the replicas log it: no replica took the fleet to give most of it
// back a moment later (without shard.replicas, the first to join takes most of them).
func TestShardedStartTogether(t *testing.T) {
	t.Parallel()
	f := newShardedFleet(t, 6)
	f.expect = 3
	const objects = 200
	createConfigMaps(t, f.members, "object", objects)
	// What each member holds, listed before the figures are read.
	want := map[string]float64{}
	names := make([]string, len(f.members))
	for i, m := range f.members {
		list, err := m.Clientset().CoreV1().ConfigMaps("").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want[m.Name] = float64(len(list.Items))
		names[i] = m.Name
	}
	handed := f.listed()

	ids := []string{"fleetwatch-0", "fleetwatch-1", "fleetwatch-2"}
	start := time.Now()
	for _, id := range ids {
		f.start(id)
	}
	f.placed(ids...)
	eventually(t, shardSettle, "every replica ready", func() string {
		for _, id := range ids {
			if code, body := f.fetch(t.Context(), f.replicas[id].base+"/readyz"); code != http.StatusOK {
				return fmt.Sprintf("%s /readyz: %d %s", id, code, body)
			}
		}
		return ""
	})
	t.Logf("3 replicas started together settled in %v", time.Since(start))

	handedAfter := f.listed()
	assigned := shard.Assign(names, ids)
	var total, totalWant float64
	for _, m := range f.members {
		n := handedAfter[m.Name] - handed[m.Name]
		total, totalWant = total+n, totalWant+want[m.Name]
		if n != want[m.Name] {
			t.Errorf("%s handed out %v configmaps as lists or initial events, want its %v once; lists: %v", m.Name, n, want[m.Name], f.lists(m, start))
		}
		ws, err := m.Watches()
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if id := replicaOf(w); id != "" && w.Resource == "configmaps" && !w.Start.Before(start) && id != assigned[m.Name] {
				t.Errorf("%s was watched by %s from %s, and is %s's", m.Name, id, w.Start.Format(time.StampMilli), assigned[m.Name])
			}
		}
	}
	t.Logf("the members handed out %v configmaps for the %v they hold", total, totalWant)
	// The replicas' logs say so too: each took only the clusters it owns, once.
	took := map[string][]string{}
	for _, id := range ids {
		b, err := os.ReadFile(f.replicas[id].log.Name())
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "Handing cluster over"); n > 0 {
			t.Errorf("%s handed %d clusters over", id, n)
		}
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, `"Took over cluster"`) {
				_, c, _ := strings.Cut(line, `cluster="`)
				c, _, _ = strings.Cut(c, `"`)
				took[c] = append(took[c], id)
			}
		}
	}
	for _, m := range f.members {
		if !slices.Equal(took[m.Name], []string{assigned[m.Name]}) {
			t.Errorf("%s was taken by %v, want once by its owner %s", m.Name, took[m.Name], assigned[m.Name])
		}
	}
}
