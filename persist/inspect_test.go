package persist

import (
	"errors"
	"os"
	"reflect"
	"testing"
)

func TestInspect(t *testing.T) {
	s := openTest(t, testPath(t), Options{})
	w := s.NewWriter(WriterOptions{})
	for i := range 3 {
		w.Upsert("b", pods, testPod(t, "ns", "p"+string(rune('0'+i))))
	}
	w.Checkpoint("b", pods, "30")
	w.Upsert("b", deployments, metadataObject("ns", "d", "1"))
	w.Checkpoint("b", deployments, "31")
	w.Checkpoint("a", pods, "7")
	if err := s.SetIdentity("b", Identity{UID: "u", Server: "https://b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetIdentity("c", Identity{UID: "w"}); err != nil {
		t.Fatal(err)
	}

	info, err := s.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(s.Path())
	if info.Path != s.Path() || info.FileSize != fi.Size() || info.SchemaVersion != uint64(len(migrations)) || info.Created.IsZero() {
		t.Errorf("info: %+v", info)
	}
	for i := range info.Clusters {
		for j := range info.Clusters[i].Resources {
			if info.Clusters[i].Resources[j].Bytes <= 0 && info.Clusters[i].Resources[j].Objects > 0 {
				t.Errorf("no bytes for %+v", info.Clusters[i].Resources[j])
			}
			info.Clusters[i].Resources[j].Bytes = 0
		}
	}
	want := []ClusterInfo{
		{Name: "a", Resources: []ResourceInfo{{Resource: pods, ResourceVersion: "7"}}},
		{Name: "b", Identity: Identity{UID: "u", Server: "https://b"}, Resources: []ResourceInfo{
			{Resource: pods, ResourceVersion: "30", Objects: 3},
			{Resource: deployments, ResourceVersion: "31", Objects: 1},
		}},
		{Name: "c", Identity: Identity{UID: "w"}},
	}
	if !reflect.DeepEqual(info.Clusters, want) {
		t.Errorf("clusters:\n got %+v\nwant %+v", info.Clusters, want)
	}
}

func TestVerify(t *testing.T) {
	path := testPath(t)
	writeSample(t, path)
	for _, readOnly := range []bool{false, true} {
		s := openTest(t, path, Options{ReadOnly: readOnly})
		if err := s.Verify(); err != nil {
			t.Errorf("Verify (read-only %v) of a good file: %v", readOnly, err)
		}
		s.Close()
	}

	// An object that decodes to another object: only decoding finds it.
	garbleObjectName(t, path)
	for _, readOnly := range []bool{false, true} {
		s := openTest(t, path, Options{ReadOnly: readOnly})
		if err := s.Verify(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Verify (read-only %v): got %v, want ErrCorrupt", readOnly, err)
		}
		if moved, _ := s.Recovered(); moved != "" {
			t.Error("Verify moved the file")
		}
		s.Close()
	}
}

// TestVerifyBadPage: pages damaged after Open checked them are found by Verify, which
// checks them again before bbolt's check follows them.
func TestVerifyBadPage(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		path := testPath(t)
		writeSample(t, path)
		s := openTest(t, path, Options{ReadOnly: readOnly})
		corruptPagesContaining(t, path, []byte("marker-object"))
		err := s.Verify()
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("Verify (read-only %v): got %v, want ErrCorrupt", readOnly, err)
		}
		t.Logf("read-only %v: %v", readOnly, err)
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}
}
