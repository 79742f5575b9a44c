package persist

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

// crashChildEnv, when set to a path, makes TestCrashConsistency the child that writes
// to the snapshot at that path until it is killed.
const crashChildEnv = "FLEETWATCH_PERSIST_CRASH_CHILD"

// crashGroup is a (cluster, resource) that the child writes.
type crashGroup struct {
	cluster  string
	resource ResourceKey
}

var crashGroups = []crashGroup{
	{"alpha", pods},
	{"alpha", deployments},
	{"arn:aws:eks:eu-west-1:123:cluster/prod", pods},
	{"arn:aws:eks:eu-west-1:123:cluster/prod", deployments},
}

const crashObjects = 30

// crashState is the state of group g at resourceVersion rv, a function of both: object
// key -> version. An object comes and goes every few resourceVersions, and changes every
// 1 to 4 of them. At rv 0 the group is empty.
func crashState(g, rv int) map[string]string {
	state := map[string]string{}
	if rv == 0 {
		return state
	}
	for i := range crashObjects {
		if (i+rv/3+g)%7 == 0 {
			continue
		}
		state[objectKey(fmt.Sprintf("ns-%d", i%3), fmt.Sprintf("obj-%02d", i))] = strconv.Itoa(rv / (i%4 + 1))
	}
	return state
}

// crashObject returns the object of group g with the given key and version; the pods
// grow with i, so that commits touch several pages.
func crashObject(g int, key, version string) runtime.Object {
	namespace, name, _ := strings.Cut(key, "/")
	if crashGroups[g].resource == deployments {
		return metadataObject(namespace, name, version)
	}
	u := object(namespace, name, version)
	n, _ := strconv.Atoi(strings.TrimPrefix(name, "obj-"))
	u.Object["payload"] = strings.Repeat("x", 300*(n%5))
	return u
}

// TestCrashConsistency kills a process that writes to a snapshot with SIGKILL at random
// moments, 20 times, and checks after each kill that the snapshot opens without a
// recovery, that each stored resource is exactly its state at its stored
// resourceVersion, and that the change log agrees: replayed, it gives each stored
// resource, and it holds no change beyond the stored resourceVersion.
func TestCrashConsistency(t *testing.T) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(t, path)
		return
	}
	if testing.Short() {
		t.Skip("starts 20 processes")
	}
	path := testPath(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	// last holds each group's last stored resourceVersion. A group may be absent (0)
	// after a kill between the child's drop of it and the checkpoint of its relist; the
	// next child then starts that group over from resourceVersion 0. Otherwise a stored
	// one must never be older than one seen before.
	last := map[int]int{}
	progress := 0
	for run := range 20 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashConsistency$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			ready <- line
		}()
		select {
		case line := <-ready:
			if line != "ready\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("run %d: child said %q", run, line)
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("run %d: child not ready", run)
		}
		time.Sleep(time.Duration(10+rng.IntN(250)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("run %d: child ended without being killed: %v", run, err)
		}

		rvs := checkCrashSnapshot(t, path)
		t.Logf("run %d: stored resourceVersions %v", run, rvs)
		for g, rv := range rvs {
			if rv == 0 {
				last[g] = 0
				continue
			}
			if rv < last[g] {
				t.Fatalf("run %d: group %d went back from resourceVersion %d to %d", run, g, last[g], rv)
			}
			last[g] = rv
			progress += rv
		}
	}
	if progress == 0 {
		t.Fatal("the child never committed")
	}
}

// checkCrashSnapshot opens the snapshot at path and checks it, and returns the stored
// resourceVersion of each group (0 if not stored).
func checkCrashSnapshot(t *testing.T, path string) []int {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open after a kill: %v", err)
	}
	defer s.Close()
	snap := mustLoad(t, s)
	if err := s.Verify(); err != nil {
		t.Fatalf("Verify after a kill: %v", err)
	}
	rvs := make([]int, len(crashGroups))
	for g, cg := range crashGroups {
		rs := resourceOf(snap, cg.cluster, cg.resource)
		if rs == nil {
			continue
		}
		rv, err := strconv.Atoi(rs.ResourceVersion)
		if err != nil {
			t.Fatalf("group %d: resourceVersion %q", g, rs.ResourceVersion)
		}
		rvs[g] = rv
		got := map[string]string{}
		for _, obj := range rs.Objects {
			m := obj.(interface {
				GetNamespace() string
				GetName() string
			})
			got[objectKey(m.GetNamespace(), m.GetName())] = versionOf(t, obj)
			if !reflect.DeepEqual(obj, crashObject(g, objectKey(m.GetNamespace(), m.GetName()), versionOf(t, obj))) {
				t.Fatalf("group %d at rv %d: object %s/%s is not what was written", g, rv, m.GetNamespace(), m.GetName())
			}
		}
		if want := crashState(g, rv); !reflect.DeepEqual(got, want) {
			t.Fatalf("group %d (%s %s) at rv %d:\n got %v\nwant %v", g, cg.cluster, cg.resource, rv, got, want)
		}
	}
	for g, cg := range crashGroups {
		checkCrashLog(t, s, g, cg, rvs[g])
	}
	return rvs
}

// checkCrashLog checks that the change log of a group, replayed from its last reset,
// gives its stored objects (none if it is not stored), and that no record is of a
// resourceVersion beyond the stored one.
func checkCrashLog(t *testing.T, s *Store, g int, cg crashGroup, rv int) {
	t.Helper()
	var changes []Change
	for q := (ChangesQuery{Cluster: cg.cluster, Resource: cg.resource}); ; {
		page, next, err := s.Changes(q)
		if err != nil {
			t.Fatalf("group %d: reading the log: %v", g, err)
		}
		changes = append(changes, page...)
		if next == 0 {
			break
		}
		q.After = next
	}
	// Only the records since the last reset are checked: those before it are of the
	// group's earlier life (a kill between the commit of a drop and the checkpoint of
	// its relist leaves the group absent, and the next child starts it over from
	// resourceVersion 0).
	since := 0
	for i, c := range changes {
		if c.Type == ChangeResourceReset {
			since = i + 1
		}
	}
	replayed := map[string]string{}
	for _, c := range changes[since:] {
		key := objectKey(c.Namespace, c.Name)
		switch c.Type {
		case ChangeAdded, ChangeModified:
			obj, err := c.Decode()
			if err != nil {
				t.Fatalf("group %d: %v", g, err)
			}
			replayed[key] = versionOf(t, obj)
		case ChangeDeleted:
			delete(replayed, key)
		default:
			t.Fatalf("group %d: record %d of type %s", g, c.Seq, c.Type)
		}
		if n, err := strconv.Atoi(c.ResourceVersion); err != nil || n > rv || rv == 0 {
			t.Fatalf("group %d stored at rv %d: record %d at rv %q", g, rv, c.Seq, c.ResourceVersion)
		}
	}
	if want := crashState(g, rv); !reflect.DeepEqual(replayed, want) {
		t.Fatalf("group %d (%s %s) at rv %d: the log replayed gives\n%v\nwant %v", g, cg.cluster, cg.resource, rv, replayed, want)
	}
}

// crashChild continues each group from its stored resourceVersion, one step at a time
// in random order, with random relists, through a Writer that commits every few
// milliseconds, until it is killed. It says "ready" on stdout once it writes.
func crashChild(t *testing.T, path string) {
	time.AfterFunc(2*time.Minute, func() { os.Exit(3) }) // if the parent is gone
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	rvs := make([]int, len(crashGroups))
	for g, cg := range crashGroups {
		if rs := resourceOf(snap, cg.cluster, cg.resource); rs != nil {
			rvs[g], _ = strconv.Atoi(rs.ResourceVersion)
		}
	}
	w := s.NewWriter(WriterOptions{Interval: 3 * time.Millisecond, MaxPending: 40, History: HistoryOptions{Enabled: true}})
	go w.Start(context.Background())
	fmt.Println("ready")

	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	for {
		g := rng.IntN(len(crashGroups))
		cg := crashGroups[g]
		prev, next := crashState(g, rvs[g]), crashState(g, rvs[g]+1)
		if rng.IntN(40) == 0 {
			// A relist that starts over: everything again, after a drop.
			w.DropResource(cg.cluster, cg.resource)
			for key, version := range next {
				w.Upsert(cg.cluster, cg.resource, crashObject(g, key, version))
			}
		} else {
			for key := range prev {
				if _, ok := next[key]; !ok {
					namespace, name, _ := strings.Cut(key, "/")
					w.Delete(cg.cluster, cg.resource, namespace, name)
				}
			}
			for key, version := range next {
				if prev[key] != version {
					w.Upsert(cg.cluster, cg.resource, crashObject(g, key, version))
				}
			}
		}
		rvs[g]++
		w.Checkpoint(cg.cluster, cg.resource, strconv.Itoa(rvs[g]))
		if rng.IntN(4) == 0 {
			time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
		}
	}
}
