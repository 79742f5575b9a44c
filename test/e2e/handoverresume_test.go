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
	ctx := t.Context()
	for _, m := range f.members {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: resumeNamespace}}
		if _, err := m.Clientset().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
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

	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	var truth sequences
	var wg sync.WaitGroup
	for _, m := range f.members {
		wg.Go(func() { watchTruth(watchCtx, t, m, &truth) })
	}
	code, body := f.fetch(ctx, through.base+"/clusters/*/api/v1/namespaces/"+resumeNamespace+"/configmaps")
	var list struct {
		Metadata metav1.ListMeta `json:"metadata"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
		t.Fatalf("list through %s: %d %s", through.id, code, body)
	}
	fw := &fleetWatcher{base: through.base, client: f.warm.client, token: f.warm.readerToken, cursors: []string{list.Metadata.ResourceVersion}}
	wg.Go(func() { fw.run(watchCtx) })
	time.Sleep(time.Second) // the truth's watches and the fleet watch are open

	churnCtx, stopChurn := context.WithCancel(ctx)
	var churnWG sync.WaitGroup
	for i, m := range f.members {
		churnWG.Go(func() { churnResume(churnCtx, t, m, 10, uint64(i)) })
	}
	time.Sleep(3 * time.Second)
	// The watch falls behind: the changes before the handover reach it from the moved
	// clusters' change log on their new owners, those after from their watches.
	fw.pause()
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
	fw.resume()
	time.Sleep(3 * time.Second)
	stopChurn()
	churnWG.Wait()

	var missed, repeated int
	var examples []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		missed, repeated, examples = compareSequences(truth.snapshot(), fw.seen.snapshot())
		if missed == 0 && repeated == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopWatching()
	wg.Wait()
	fw.mu.Lock()
	gone, opened := slices.Clone(fw.gone), fw.opened
	fw.mu.Unlock()
	changes := 0
	for _, s := range truth.snapshot() {
		changes += len(s)
	}
	t.Logf("%d changes of %d objects on the servers; the watch was opened %d times: %d missed, %d repeated", changes, len(truth.snapshot()), opened, missed, repeated)
	if missed != 0 || repeated != 0 {
		t.Errorf("the resumed watch is not the servers' sequence of changes: %d missed, %d repeated; for example:\n%s", missed, repeated, strings.Join(examples, "\n"))
	}
	if len(gone) > 0 {
		t.Errorf("the watch got 410 across the handover %d times, first from %s", len(gone), gone[0])
	}
	if moved := f.movedWarm(ids, live, since); moved == 0 {
		t.Error("no member moved")
	}
}
