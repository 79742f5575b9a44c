package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetwatch/fleetwatch/shard"
)

// TestWatchResumesAcrossAHandover (#35): a fleet watch through one replica of a sharded
// fleet with history.enabled, over 3 members under churn, falls behind; the replica
// that owns the first member stops (SIGTERM), handing its clusters over warm with their
// change logs; the watch resumes from its last resourceVersion, which holds the moved
// clusters' positions in the stopped replica's part: in the end it has, per object,
// exactly the changes the servers sent, none missed and none repeated, without a 410.
func TestWatchResumesAcrossAHandover(t *testing.T) {
	t.Parallel()
	watchAcrossAHandover(t, false)
}

// TestWatchResumesAcrossAHandoverAndARestart (#35) is TestWatchResumesAcrossAHandover
// with the new owner of the first member killed with SIGKILL and started again after
// the handover, before the watch resumes: its snapshot kept which change logs the
// member's records came from, so that it still places the stopped replica's position.
func TestWatchResumesAcrossAHandoverAndARestart(t *testing.T) {
	t.Parallel()
	watchAcrossAHandover(t, true)
}

// watchAcrossAHandover runs TestWatchResumesAcrossAHandover, with the new owner of the
// first member restarted after a kill -9 if restart is set.
func watchAcrossAHandover(t *testing.T, restart bool) {
	f := newSecureShardedFleet(t, 3)
	f.history = true
	// The replicas wait for each other before they take clusters, as the chart's do, so
	// that each member has one owner from the start and the handover below is its only
	// move. (One that the first replica up took and handed to its owner a moment later
	// would come back to it there, A to B to A, which server's
	// TestFanOutWatchResumesAfterComingBack covers.)
	f.expect = 3
	createResumeNamespaces(t, f)
	ids := []string{"fleetwatch-0", "fleetwatch-1", "fleetwatch-2"}
	for _, id := range ids {
		f.start(id)
	}
	eventually(t, shardSettle, fmt.Sprintf("settling on %v", ids), func() string { return f.settled(ids) })
	names := make([]string, len(f.members))
	for i, m := range f.members {
		names[i] = m.Name
	}
	// The owner of the first member leaves; the watch goes through another replica.
	leaving := shard.Owner(names[0], ids)
	live := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == leaving })
	through := f.replicas[live[0]]
	newOwner := shard.Owner(names[0], live)
	if restart && newOwner == through.id {
		// The watch goes through the replica that is not restarted.
		through = f.replicas[live[1]]
	}
	t.Logf("watching through %s; %s leaves, owning %v; %s takes %s over", through.id, leaving, shard.Assign(names, ids), newOwner, names[0])

	run := startResumeRun(f, through)
	time.Sleep(3 * time.Second)
	// The watch falls behind: the changes before the handover reach it from the moved
	// clusters' change log on their new owners, those after from their watches.
	run.fw.pause()
	time.Sleep(time.Second)
	since := time.Now()
	f.stopReplica(leaving)
	f.placed(live...)
	time.Sleep(2 * time.Second)
	if restart {
		// Its successor says it is back within the Lease's duration, so that the
		// clusters stay with it (shard.SuccessorAnnotation): it takes them warm once the
		// killed process's Lease has expired, none of the others takes them cold.
		_ = f.replicas[newOwner].signal(t, syscall.SIGKILL)
		f.start(newOwner)
		f.placed(live...)
		for _, id := range live {
			if id == newOwner {
				continue
			}
			if b, err := os.ReadFile(f.replicas[id].log.Name()); err != nil {
				t.Fatal(err)
			} else if i := bytes.Index(b, []byte("Taking the cluster of a replica whose Lease expired")); i >= 0 {
				t.Fatalf("%s took a cluster of %s while it restarted: %s", id, newOwner, b[i:i+bytes.IndexByte(b[i:], '\n')])
			}
		}
		time.Sleep(time.Second)
	}
	run.fw.resume()
	time.Sleep(3 * time.Second)
	run.finish()
	if moved := f.movedWarm(ids, live, since); moved == 0 {
		t.Error("no member moved")
	}
}

// TestWatchResumesAfterAClusterComesBack (#35): a member moves from its owner A to a
// replica B that joins, and back to A, in the same run of A (A to B to A). Two replicas
// own the 3 members; a third joins and takes a member over warm from A, while a fleet
// watch through the other replica sees the member change there; the watch falls
// behind; the third replica stops, handing the member back to A warm with its change
// log, and A loads it again. The watch resumes from its last resourceVersion, whose
// newest position of the member is in B's part: in the end it has, per object, exactly
// the changes the servers sent, none missed and none repeated, without a 410.
func TestWatchResumesAfterAClusterComesBack(t *testing.T) {
	t.Parallel()
	f := newSecureShardedFleet(t, 3)
	f.history = true
	f.expect = 2
	createResumeNamespaces(t, f)
	first := []string{"fleetwatch-0", "fleetwatch-1"}
	names := make([]string, len(f.members))
	for i, m := range f.members {
		names[i] = m.Name
	}
	// The replica that joins: the first identity after them that takes a member.
	var joiner, member string
	for i := len(first); joiner == ""; i++ {
		id := fmt.Sprintf("fleetwatch-%d", i)
		for _, n := range names {
			if shard.Owner(n, append(slices.Clone(first), id)) == id {
				joiner, member = id, n
				break
			}
		}
	}
	all := append(slices.Clone(first), joiner)
	back := shard.Owner(member, first)
	for _, id := range first {
		f.start(id)
	}
	eventually(t, shardSettle, fmt.Sprintf("settling on %v", first), func() string { return f.settled(first) })
	through := f.replicas[first[0]]
	if through.id == back {
		through = f.replicas[first[1]]
	}
	t.Logf("watching through %s; %s joins and takes %s from %s, then leaves", through.id, joiner, member, back)
	run := startResumeRun(f, through)
	time.Sleep(2 * time.Second)
	f.start(joiner)
	f.placed(all...)
	// The watch sees the member change on the replica that joined.
	time.Sleep(3 * time.Second)
	run.fw.pause()
	time.Sleep(time.Second)
	since := time.Now()
	f.stopReplica(joiner)
	f.placed(first...)
	time.Sleep(2 * time.Second)
	run.fw.resume()
	time.Sleep(3 * time.Second)
	run.finish()
	if moved := f.movedWarm(all, first, since); moved == 0 {
		t.Errorf("%s did not move back", member)
	}
}

// createResumeNamespaces creates the namespace of the churn in every member.
func createResumeNamespaces(t *testing.T, f *shardedFleet) {
	for _, m := range f.members {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: resumeNamespace}}
		if _, err := m.Clientset().CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// resumeRun is a fleet watch through one replica of a sharded fleet, beside the
// members' own watches (the truth), under churn on every member.
type resumeRun struct {
	f                       *shardedFleet
	fw                      *fleetWatcher
	truth                   sequences
	watchers, churners      sync.WaitGroup
	stopWatching, stopChurn context.CancelFunc
}

// startResumeRun lists through the replica through and watches from the list's
// resourceVersion, opens the members' own watches, and starts the churn.
func startResumeRun(f *shardedFleet, through *fleetReplica) *resumeRun {
	t := f.t
	t.Helper()
	ctx := t.Context()
	r := &resumeRun{f: f}
	watchCtx, stopWatching := context.WithCancel(ctx)
	r.stopWatching = stopWatching
	t.Cleanup(stopWatching)
	for _, m := range f.members {
		r.watchers.Go(func() { watchTruth(watchCtx, t, m, resumeNamespace, &r.truth) })
	}
	code, body := f.fetch(ctx, through.base+"/clusters/*/api/v1/namespaces/"+resumeNamespace+"/configmaps")
	var list struct {
		Metadata metav1.ListMeta `json:"metadata"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
		t.Fatalf("list through %s: %d %s", through.id, code, body)
	}
	r.fw = &fleetWatcher{base: through.base, client: f.warm.client, token: f.warm.readerToken, cursors: []string{list.Metadata.ResourceVersion}}
	r.watchers.Go(func() { r.fw.run(watchCtx) })
	time.Sleep(time.Second) // the truth's watches and the fleet watch are open

	churnCtx, stopChurn := context.WithCancel(ctx)
	r.stopChurn = stopChurn
	t.Cleanup(stopChurn)
	for i, m := range f.members {
		r.churners.Go(func() { churnResume(churnCtx, t, m, resumeNamespace, 10, uint64(i)) })
	}
	return r
}

// finish stops the churn, waits until the fleet watch has what the members' watches
// have (at most 30 s), and fails the test unless it has, per object, exactly their
// changes, without a 410.
func (r *resumeRun) finish() {
	t := r.f.t
	t.Helper()
	r.stopChurn()
	r.churners.Wait()
	var missed, repeated int
	var examples []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		missed, repeated, examples = compareSequences(r.truth.snapshot(), r.fw.seen.snapshot())
		if missed == 0 && repeated == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.stopWatching()
	r.watchers.Wait()
	r.fw.mu.Lock()
	gone, opened := slices.Clone(r.fw.gone), r.fw.opened
	r.fw.mu.Unlock()
	changes := 0
	for _, s := range r.truth.snapshot() {
		changes += len(s)
	}
	t.Logf("%d changes of %d objects on the servers; the watch was opened %d times: %d missed, %d repeated", changes, len(r.truth.snapshot()), opened, missed, repeated)
	if missed != 0 || repeated != 0 {
		t.Errorf("the resumed watch is not the servers' sequence of changes: %d missed, %d repeated; for example:\n%s", missed, repeated, strings.Join(examples, "\n"))
	}
	if len(gone) > 0 {
		t.Errorf("the watch got 410 across the handover %d times, first from %s", len(gone), gone[0])
	}
}
