package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/shard"
)

// fleetChangesQuery is the query of TestFleetChanges, as the page's Changes view sends
// it: the test's configmaps of the last hour.
const fleetChangesQuery = "since=1h&q=" + "ns%3Ashop+h-"

// changesPages reads every page of the changes of fleetChangesQuery through the replica
// at base as the client c, limit a page, from after (a resourceVersion; "" for none), and returns
// "type cluster/ns/name@objectResourceVersion" of each change in order, the last page's
// resourceVersion and the Warnings. It fails the test if a record, (replica, seq), comes
// twice.
func changesPages(ctx context.Context, t *testing.T, c changesClient, base string, limit int, after string) (got []string, rv, warnings string) {
	t.Helper()
	seen := map[string]bool{}
	next := ""
	for range 1000 {
		u := fmt.Sprintf("%s/apis/fleetwatch.io/v1alpha1/changes?%s&limit=%d", base, fleetChangesQuery, limit)
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		if next != "" {
			u += "&continue=" + url.QueryEscape(next)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		res, err := c.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var page v1alpha1.ChangeList
		if res.StatusCode != http.StatusOK || json.Unmarshal(body, &page) != nil {
			t.Fatalf("GET %s: %s %.300s", u, res.Status, body)
		}
		if len(page.Items) > limit {
			t.Fatalf("GET %s: %d items", u, len(page.Items))
		}
		warnings += strings.Join(res.Header.Values("Warning"), "\n")
		for _, c := range page.Items {
			id := fmt.Sprintf("%s:%d", c.Replica, c.Seq)
			if c.Replica == "" || seen[id] {
				t.Fatalf("through %s, limit %d: the record %s twice, or of no replica: %+v", base, limit, id, c)
			}
			seen[id] = true
			got = append(got, fmt.Sprintf("%s %s/%s/%s@%s", c.Type, c.Cluster, c.Namespace, c.Name, c.ObjectResourceVersion))
		}
		rv = page.Metadata.ResourceVersion
		if next = page.Metadata.Continue; next == "" {
			return got, rv, warnings
		}
	}
	t.Fatal("more than 1000 pages")
	return nil, "", ""
}

// changesClient is who reads the changes: an HTTP client and a bearer token, if any.
type changesClient struct {
	client *http.Client
	token  string
}

// changesTruth makes changes to configmaps named prefix-i of the members, n added and
// the first modified of each, and returns them as changesPages returns them, with the
// resourceVersions the servers gave them, by member.
func changesTruth(t *testing.T, members []*testenv.Cluster, prefix string, n int) map[string][]string {
	t.Helper()
	ctx := t.Context()
	out := map[string][]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(func() {
			var mine []string
			cms := m.Clientset().CoreV1().ConfigMaps("shop")
			for i := range n {
				cm, err := cms.Create(ctx, configMap("shop", fmt.Sprintf("%s-%d", prefix, i), m.Name), metav1.CreateOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				mine = append(mine, fmt.Sprintf("Added %s/shop/%s@%s", m.Name, cm.Name, cm.ResourceVersion))
				if i == 0 {
					cm.Data = map[string]string{"step": "2"}
					if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, fmt.Sprintf("Modified %s/shop/%s@%s", m.Name, cm.Name, cm.ResourceVersion))
				}
			}
			mu.Lock()
			out[m.Name] = mine
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// flatten returns the changes of the members of truth, sorted.
func flatten(truth map[string][]string, members ...string) []string {
	var out []string
	for _, m := range members {
		out = append(out, truth[m]...)
	}
	sort.Strings(out)
	return out
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// TestFleetChanges (#35) runs three replicas of the real binary with history.enabled over
// three member apiservers, changes configmaps there, and asks each replica for the
// fleet's changes as the page's Changes view does: through every replica, in pages of 3
// or 500, they are the same sequence, every change the servers made once and no record
// twice; a client that read up to a resourceVersion reads what came after through
// another replica; an object's history is its owner's through every replica. After kill
// -9 of a replica, the others answer without its clusters and a Warning names them, also
// for a continue token handed out before; once it is back, every replica answers the
// whole set again.
func TestFleetChanges(t *testing.T) {
	t.Parallel()
	f := newShardedFleet(t, 3)
	f.history = true
	ctx := t.Context()
	ids := []string{"fleetwatch-0", "fleetwatch-1", "fleetwatch-2"}
	for _, id := range ids {
		f.start(id)
	}
	eventually(t, shardSettle, fmt.Sprintf("settling on %v", ids), func() string { return f.settled(ids) })
	names := make([]string, len(f.members))
	for i, m := range f.members {
		names[i] = m.Name
	}
	assigned := shard.Assign(names, ids)
	t.Logf("owners: %v", assigned)
	reader := changesClient{client: f.client}

	truth := changesTruth(t, f.members, "h", 4)
	want := flatten(truth, names...)
	var sequence []string
	eventually(t, 30*time.Second, "every change in the logs", func() string {
		got, _, warn := changesPages(ctx, t, reader, f.replicas[ids[0]].base, 500, "")
		if !slices.Equal(sortedCopy(got), want) || warn != "" {
			return fmt.Sprintf("%d changes, Warning %q:\n%s", len(got), warn, keyDiff(sortedCopy(got), want))
		}
		sequence = got
		return ""
	})

	t.Run("the same changes through every replica, in any page size", func(t *testing.T) {
		for _, id := range ids {
			for _, limit := range []int{3, 500} {
				got, _, warn := changesPages(ctx, t, reader, f.replicas[id].base, limit, "")
				if !slices.Equal(got, sequence) || warn != "" {
					t.Errorf("through %s, limit %d: %d changes, want the %d through %s in the same order; Warning %q:\n%s\nwant:\n%s",
						id, limit, len(got), len(sequence), ids[0], warn, strings.Join(got, "\n"), strings.Join(sequence, "\n"))
				}
			}
		}
	})

	t.Run("after a resourceVersion, through another replica", func(t *testing.T) {
		_, rv, _ := changesPages(ctx, t, reader, f.replicas[ids[0]].base, 5, "")
		more := changesTruth(t, f.members, "h-after", 1)
		wantMore := flatten(more, names...)
		eventually(t, 30*time.Second, "the changes after the resourceVersion", func() string {
			got, _, _ := changesPages(ctx, t, reader, f.replicas[ids[1]].base, 2, rv)
			if !slices.Equal(sortedCopy(got), wantMore) {
				return fmt.Sprintf("after %s: %v, want %v", rv, got, wantMore)
			}
			return ""
		})
		for m, c := range more {
			truth[m] = append(truth[m], c...)
		}
		want = flatten(truth, names...)
		// A plain seq is of one replica's log.
		code, body := fetchAs(ctx, f.client, f.replicas[ids[2]].base+"/apis/fleetwatch.io/v1alpha1/changes?after=1", "")
		if code != http.StatusBadRequest || !strings.Contains(string(body), "metadata.resourceVersion") {
			t.Errorf("after=1 of every cluster: %d %s", code, body)
		}
	})

	t.Run("an object's history through every replica", func(t *testing.T) {
		for _, m := range f.members {
			for _, id := range ids {
				var h v1alpha1.ObjectHistory
				code, body := fetchAs(ctx, f.client, f.replicas[id].base+"/clusters/"+m.Name+"/apis/fleetwatch.io/v1alpha1/history?version=v1&resource=configmaps&namespace=shop&name=h-0", "")
				if code != http.StatusOK || json.Unmarshal(body, &h) != nil {
					t.Fatalf("the history of %s's h-0 through %s: %d %s", m.Name, id, code, body)
				}
				var steps []string
				for _, s := range h.Items {
					steps = append(steps, fmt.Sprintf("%s %s/%s/%s@%s", s.Type, m.Name, "shop", h.Object.Name, s.ObjectResourceVersion))
					if s.Replica != assigned[m.Name] {
						t.Errorf("the history of %s's h-0 through %s: a step of %q's log, want its owner's, %s", m.Name, id, s.Replica, assigned[m.Name])
					}
				}
				if !slices.Equal(steps, truth[m.Name][:2]) || len(h.Items) < 2 || !slices.ContainsFunc(h.Items[1].Fields, func(fc v1alpha1.FieldChange) bool { return fc.Path == ".data.step" }) {
					t.Errorf("the history of %s's h-0 through %s: %s, want %v with .data.step", m.Name, id, body, truth[m.Name][:2])
				}
			}
		}
	})

	t.Run("the page's Changes view through every replica", func(t *testing.T) {
		// The view is the page's script reading the API as above: the page is served,
		// with the script that reads the changes, through every replica.
		for _, id := range ids {
			for _, p := range []string{"/?view=changes&q=ns%3Ashop", "/ui/changes.js"} {
				if code, body := fetchAs(ctx, f.client, f.replicas[id].base+p, ""); code != http.StatusOK || len(body) == 0 {
					t.Errorf("%s through %s: %d", p, id, code)
				}
			}
		}
	})

	t.Run("kill -9 of a replica", func(t *testing.T) {
		victim := assigned[names[0]]
		var theirs, others []string
		for _, m := range names {
			if assigned[m] == victim {
				theirs = append(theirs, m)
			} else {
				others = append(others, m)
			}
		}
		live := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == victim })
		// A first page before, the rest after.
		first := map[string]string{}
		for _, id := range live {
			u := f.replicas[id].base + "/apis/fleetwatch.io/v1alpha1/changes?" + fleetChangesQuery + "&limit=2"
			var page v1alpha1.ChangeList
			if code, body := fetchAs(ctx, f.client, u, ""); code != http.StatusOK || json.Unmarshal(body, &page) != nil || page.Metadata.Continue == "" {
				t.Fatalf("a first page through %s: %d %s", id, code, body)
			}
			first[id] = page.Metadata.Continue
		}
		killed := time.Now()
		_ = f.replicas[victim].signal(t, syscall.SIGKILL)
		wantOthers := flatten(truth, others...)
		for _, id := range live {
			got, _, warn := changesPages(ctx, t, reader, f.replicas[id].base, 3, "")
			elapsed := time.Since(killed)
			if elapsed > shardLease {
				t.Logf("the check through %s came %v after kill -9, past the Lease: its owners may have changed", id, elapsed)
				continue
			}
			if !slices.Equal(sortedCopy(got), wantOthers) {
				t.Errorf("through %s, %v after kill -9 of %s: %d changes, want those of %v, %d:\n%s", id, elapsed, victim, len(got), others, len(wantOthers), keyDiff(sortedCopy(got), wantOthers))
			}
			for _, m := range theirs {
				if !strings.Contains(warn, m+` (replica \"`+victim+`\" did not answer`) {
					t.Errorf("through %s after kill -9 of %s: the Warning does not name %s: %q", id, victim, m, warn)
				}
			}
			// A token handed out before: the rest of the pages, without the victim's
			// clusters, and the Warning.
			u := f.replicas[id].base + "/apis/fleetwatch.io/v1alpha1/changes?" + fleetChangesQuery + "&limit=2&continue=" + url.QueryEscape(first[id])
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			res, err := f.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK || !strings.Contains(strings.Join(res.Header.Values("Warning"), " "), victim) {
				t.Errorf("a continue token from before kill -9, through %s: %s, Warning %q", id, res.Status, res.Header.Values("Warning"))
			}
		}

		// Back: it takes its clusters again, and every replica answers the whole set.
		f.start(victim)
		eventually(t, shardSettle, fmt.Sprintf("settling on %v", ids), func() string { return f.settled(ids) })
		eventually(t, 30*time.Second, "the whole set through every replica", func() string {
			var through []string
			for _, id := range ids {
				got, _, warn := changesPages(ctx, t, reader, f.replicas[id].base, 3, "")
				if warn != "" {
					return fmt.Sprintf("through %s: Warning %q", id, warn)
				}
				sorted := sortedCopy(got)
				for _, w := range want {
					if _, found := slices.BinarySearch(sorted, w); !found {
						return fmt.Sprintf("through %s: %s missing", id, w)
					}
				}
				if through != nil && !slices.Equal(got, through) {
					return fmt.Sprintf("through %s: %v, through %s: %v", id, got, ids[0], through)
				}
				through = got
			}
			return ""
		})
	})
}

// TestFleetChangesAcrossAHandover (#35): a sharded fleet with history.enabled whose
// replicas hand clusters over warm; the owner of a member stops (SIGTERM), and its new
// owner holds the member's change log: the member's object's history, through every
// replica, has its steps from before the move, now of its new owner's log, and the
// fleet's changes through every replica are still the servers' changes, each once.
func TestFleetChangesAcrossAHandover(t *testing.T) {
	t.Parallel()
	f := newSecureShardedFleet(t, 3)
	f.history = true
	ctx := t.Context()
	ids := []string{"fleetwatch-0", "fleetwatch-1", "fleetwatch-2"}
	for _, id := range ids {
		f.start(id)
	}
	eventually(t, shardSettle, fmt.Sprintf("settling on %v", ids), func() string { return f.settled(ids) })
	names := make([]string, len(f.members))
	for i, m := range f.members {
		names[i] = m.Name
	}
	reader := changesClient{client: f.warm.client, token: f.warm.readerToken}
	truth := changesTruth(t, f.members, "h", 3)
	want := flatten(truth, names...)
	// objectChanges are the changes of got that are objects' (not a cluster's marker).
	objectChanges := func(got []string) []string {
		return sortedCopy(slices.DeleteFunc(slices.Clone(got), func(c string) bool { return strings.HasSuffix(c, "/@") }))
	}
	eventually(t, 30*time.Second, "every change in the logs", func() string {
		got, _, warn := changesPages(ctx, t, reader, f.replicas[ids[0]].base, 500, "")
		if got := objectChanges(got); !slices.Equal(got, want) || warn != "" {
			return fmt.Sprintf("%d changes, Warning %q:\n%s", len(got), warn, keyDiff(got, want))
		}
		return ""
	})

	moving := names[0]
	leaving := shard.Owner(moving, ids)
	live := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == leaving })
	owner := shard.Owner(moving, live)
	since := time.Now()
	f.stopReplica(leaving)
	f.placed(live...)
	if moved := f.movedWarm(ids, live, since); moved == 0 {
		t.Fatal("no member moved")
	}
	t.Logf("%s moved from %s to %s", moving, leaving, owner)

	for _, id := range live {
		eventually(t, 30*time.Second, fmt.Sprintf("the history of %s's h-0 through %s", moving, id), func() string {
			var h v1alpha1.ObjectHistory
			code, body := f.warm.get(ctx, f.replicas[id].base+"/clusters/"+moving+"/apis/fleetwatch.io/v1alpha1/history?version=v1&resource=configmaps&namespace=shop&name=h-0", reader.token)
			if code != http.StatusOK || json.Unmarshal(body, &h) != nil {
				return fmt.Sprintf("%d %s", code, body)
			}
			var steps []string
			for _, s := range h.Items {
				if s.Replica != owner {
					return fmt.Sprintf("a step of %q's log, want its new owner's, %s: %s", s.Replica, owner, body)
				}
				steps = append(steps, fmt.Sprintf("%s %s/%s/%s@%s", s.Type, moving, "shop", h.Object.Name, s.ObjectResourceVersion))
			}
			if got := steps; !slices.Equal(objectChanges(got), truth[moving][:2]) {
				return fmt.Sprintf("%v, want %v: %s", got, truth[moving][:2], body)
			}
			return ""
		})
		eventually(t, 30*time.Second, "the fleet's changes through "+id, func() string {
			got, _, warn := changesPages(ctx, t, reader, f.replicas[id].base, 2, "")
			if got := objectChanges(got); !slices.Equal(got, want) || warn != "" {
				return fmt.Sprintf("%d changes, Warning %q:\n%s", len(got), warn, keyDiff(got, want))
			}
			return ""
		})
	}
}
