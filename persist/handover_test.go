package persist

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"maps"
	"slices"
	"testing"
)

// exportSample writes cluster "a" (pods and deployments, with an identity) and "b" into
// a new Store and returns a's exported state.
func exportSample(t testing.TB) []byte {
	t.Helper()
	s := openTest(t, testPath(t), Options{})
	w := s.NewWriter(WriterOptions{})
	w.Upsert("a", pods, object("ns", "p1", "1"))
	w.Upsert("a", pods, object("ns", "p2", "2"))
	w.Checkpoint("a", pods, "100")
	w.Upsert("a", deployments, metadataObject("ns", "d1", "3"))
	w.Checkpoint("a", deployments, "101")
	w.Upsert("b", pods, object("ns", "other", "9"))
	w.Checkpoint("b", pods, "7")
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.SetIdentity("a", Identity{UID: "uid-a", Server: "https://a.example"}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.ExportCluster("a", &buf, ExportOptions{}); err != nil {
		t.Fatalf("ExportCluster: %v", err)
	}
	return buf.Bytes()
}

func TestExportImportCluster(t *testing.T) {
	state := exportSample(t)

	// The importing Store holds an older state of a, and another cluster, which stays.
	dst := openTest(t, testPath(t), Options{})
	w := dst.NewWriter(WriterOptions{})
	w.Upsert("a", pods, object("ns", "stale", "0"))
	w.Checkpoint("a", pods, "5")
	w.Upsert("c", pods, object("ns", "mine", "4"))
	w.Checkpoint("c", pods, "40")
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	cs, err := dst.ImportCluster("a", bytes.NewReader(state), ImportOptions{})
	if err != nil {
		t.Fatalf("ImportCluster: %v", err)
	}
	if cs.Identity != (Identity{UID: "uid-a", Server: "https://a.example"}) {
		t.Errorf("identity: got %+v", cs.Identity)
	}
	snap := mustLoad(t, dst)
	for _, got := range []*ClusterSnapshot{cs, snap.Clusters["a"]} {
		if rs := got.Resources[pods]; rs == nil || rs.ResourceVersion != "100" || !slices.Equal(sorted(contents(t, rs)), []string{"ns/p1=1", "ns/p2=2"}) {
			t.Errorf("pods: got %+v", rs)
		}
		if rs := got.Resources[deployments]; rs == nil || rs.ResourceVersion != "101" || !slices.Equal(contents(t, rs), []string{"ns/d1=3"}) {
			t.Errorf("deployments: got %+v", rs)
		}
	}
	if rs := resourceOf(snap, "c", pods); rs == nil || rs.ResourceVersion != "40" {
		t.Errorf("another cluster changed: %+v", rs)
	}
	if snap.Clusters["b"] != nil {
		t.Error("the export holds another cluster")
	}
}

// TestImportClusterOlderVersions imports the states of older builds: of a build before
// version 2, whose StatefulSets were stored from protobuf without their
// volumeClaimTemplates' apiVersion and kind, and of one before version 3, whose CSINodes
// were stored with a status of {} that an apiserver before 1.37 does not serve. Those
// are left out, to be listed again, and the rest is imported. The same state as version
// 3 and 4 imports whole; a later version is refused.
func TestImportClusterOlderVersions(t *testing.T) {
	statefulSets := ResourceKey("apps/v1/statefulsets?spec=")
	csiNodes := ResourceKey("storage.k8s.io/v1/csinodes?spec=")
	src := openTest(t, testPath(t), Options{})
	w := src.NewWriter(WriterOptions{})
	w.Upsert("a", pods, object("ns", "p1", "1"))
	w.Checkpoint("a", pods, "100")
	w.Upsert("a", statefulSets, object("ns", "web", "2"))
	w.Checkpoint("a", statefulSets, "101")
	w.Upsert("a", csiNodes, object("", "node-1", "3"))
	w.Checkpoint("a", csiNodes, "102")
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := src.ExportCluster("a", &buf, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	state := buf.Bytes()
	if state[len(stateMagic)] != stateVersion {
		t.Fatalf("exported as version %d, want %d", state[len(stateMagic)], stateVersion)
	}
	// The end frame: 'e', the number of frames, the CRC-32C of every byte before it.
	end := bytes.LastIndexByte(state[:len(state)-4], frameEnd)
	as := func(version byte) []byte {
		b := slices.Clone(state)
		b[len(stateMagic)] = version
		binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:end], castagnoli))
		return b
	}

	for _, tt := range []struct {
		name  string
		state []byte
		want  []ResourceKey
	}{
		{"version 1", as(1), []ResourceKey{pods}},
		{"version 2", as(2), []ResourceKey{pods, statefulSets}},
		{"version 3", as(3), []ResourceKey{pods, statefulSets, csiNodes}},
		{"version 4", state, []ResourceKey{pods, statefulSets, csiNodes}},
		{"version 5", as(5), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dst := openTest(t, testPath(t), Options{})
			cs, err := dst.ImportCluster("a", bytes.NewReader(tt.state), ImportOptions{})
			if tt.want == nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("ImportCluster: %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ImportCluster: %v", err)
			}
			for _, got := range []*ClusterSnapshot{cs, mustLoad(t, dst).Clusters["a"]} {
				keys := slices.Sorted(maps.Keys(got.Resources))
				if !slices.Equal(keys, tt.want) {
					t.Errorf("resources %v, want %v", keys, tt.want)
				}
				if rs := got.Resources[pods]; rs == nil || rs.ResourceVersion != "100" {
					t.Errorf("pods: %+v", rs)
				}
			}
		})
	}
}

func TestExportClusterNotStored(t *testing.T) {
	s := openTest(t, testPath(t), Options{})
	if err := s.ExportCluster("none", &bytes.Buffer{}, ExportOptions{}); !errors.Is(err, ErrNoState) {
		t.Errorf("got %v, want ErrNoState", err)
	}
}

func TestImportClusterRejectsBadState(t *testing.T) {
	state := exportSample(t)
	flip := func(i int) []byte {
		b := slices.Clone(state)
		b[i] ^= 0x40
		return b
	}
	tests := []struct {
		name    string
		cluster string
		state   []byte
	}{
		{"empty", "a", nil},
		{"not a state", "a", []byte("{\"kind\":\"Status\"}")},
		{"truncated in the middle", "a", state[:len(state)/2]},
		{"truncated before the end", "a", state[:len(state)-6]},
		{"without its last byte", "a", state[:len(state)-1]},
		{"a byte changed in the middle", "a", flip(len(state) / 2)},
		{"a byte changed in the checksum", "a", flip(len(state) - 1)},
		{"bytes after the end", "a", append(slices.Clone(state), 0)},
		{"of another cluster", "b", state},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := openTest(t, testPath(t), Options{})
			w := dst.NewWriter(WriterOptions{})
			w.Upsert(tt.cluster, pods, object("ns", "kept", "1"))
			w.Checkpoint(tt.cluster, pods, "5")
			if err := w.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			_, err := dst.ImportCluster(tt.cluster, bytes.NewReader(tt.state), ImportOptions{})
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
			// The Store is as it was.
			if rs := resourceOf(mustLoad(t, dst), tt.cluster, pods); rs == nil || rs.ResourceVersion != "5" || !slices.Equal(contents(t, rs), []string{"ns/kept=1"}) {
				t.Errorf("the Store changed: %+v", rs)
			}
		})
	}
}

func FuzzImportCluster(f *testing.F) {
	state := exportSample(f)
	f.Add(state)
	f.Add(state[:len(state)/2])
	f.Add([]byte(stateMagic + "\x01e\x00\x00\x00\x00\x00"))
	f.Add([]byte(stateMagic + "\x01r\xff\xff\xff\xff\x0f"))
	s := openTest(f, testPath(f), Options{})
	f.Fuzz(func(t *testing.T, data []byte) {
		cs, err := s.ImportCluster("a", bytes.NewReader(data), ImportOptions{})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if cs == nil {
			t.Fatal("nil state without an error")
		}
	})
}
