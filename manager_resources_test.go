package fleetwatch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
)

// unreachableKubeconfig writes a kubeconfig whose one context points at a port where
// nothing listens, and returns its path.
func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "http://127.0.0.1:1"}
users:
- name: u
contexts:
- name: one
  context: {cluster: c, user: u}
current-context: one
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestNewManagerValidatesResources: NewManager refuses every list of resources that an
// informer set would refuse, naming the field, rather than leaving each Engage to fail
// and be retried forever.
func TestNewManagerValidatesResources(t *testing.T) {
	kubeconfig := unreachableKubeconfig(t)
	tests := []struct {
		name      string
		resources []informer.Resource
		want      []string // one line of the error each
	}{
		{"empty", nil, []string{"fleetwatch: Options.Resources is empty"}},
		{"a name twice", []informer.Resource{{Name: "pods"}, {Name: "deployments.apps"}, {Name: "pods", LabelSelector: "app=web"}}, []string{
			`fleetwatch: Options.Resources[2].Name: "pods" is already configured by Options.Resources[0]`,
		}},
		{"every problem", []informer.Resource{
			{Name: "Pods"},
			{Name: "configmaps", Namespaces: []string{"shop", "Shop", "shop"}, LabelSelector: "app in (web", FieldSelector: "metadata.name"},
		}, []string{
			`fleetwatch: Options.Resources[0].Name: invalid resource name: "Pods" must be lower case`,
			`Options.Resources[1].Namespaces[1]: "Shop" is not a namespace name: `,
			`Options.Resources[1].Namespaces[2]: "shop" is already listed as Options.Resources[1].Namespaces[0]`,
			`Options.Resources[1].LabelSelector: "app in (web": `,
			`Options.Resources[1].FieldSelector: "metadata.name": `,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewManager(Options{Clusters: cluster.Options{Kubeconfigs: []string{kubeconfig}}, Resources: tt.resources})
			if err == nil {
				t.Fatalf("NewManager succeeded: %v", m)
			}
			checkErrorLines(t, err, tt.want)
		})
	}
}

// checkErrorLines fails t unless err has one line per item of want, each starting with
// it.
func checkErrorLines(t *testing.T, err error, want []string) {
	t.Helper()
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("error\n%v\nwant %d lines starting with\n%s", err, len(want), strings.Join(want, "\n"))
	}
	for i, line := range lines {
		if !strings.HasPrefix(line, want[i]) {
			t.Errorf("line %d of the error is\n%s\nwant it to start with\n%s", i, line, want[i])
		}
	}
}

// TestReconfigureWithInvalidResourcesChangesNothing: Reconfigure refuses a list of
// resources that the informer sets would refuse before it changes anything: not the
// options, not the clusters, not the informers of an engaged cluster.
func TestReconfigureWithInvalidResourcesChangesNothing(t *testing.T) {
	kubeconfig := unreachableKubeconfig(t)
	opts := Options{
		Clusters:    cluster.Options{Kubeconfigs: []string{kubeconfig}},
		Resources:   []informer.Resource{{Name: "pods"}, {Name: "configmaps", MetadataOnly: true}},
		SyncTimeout: time.Hour,
	}
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	// An engaged cluster, whose server does not answer: its informer set holds the
	// configured resources, Pending.
	ctx, cancel := context.WithCancel(t.Context())
	defer func() {
		cancel()
		m.wg.Wait()
	}()
	c := &cluster.Cluster{Name: "one", Context: "one", Kubeconfig: kubeconfig, Config: &rest.Config{Host: "http://127.0.0.1:1"}}
	if err := m.Engage(ctx, c); err != nil {
		t.Fatal(err)
	}
	before := m.options()

	next := opts
	next.Clusters = cluster.Options{Kubeconfigs: []string{kubeconfig}, Include: []string{"other-*"}}
	next.Resources = []informer.Resource{{Name: "pods"}, {Name: "secrets"}, {Name: "pods", MetadataOnly: true}}
	next.SyncTimeout, next.MaxConcurrentSyncs, next.KeepManagedFields = time.Minute, 3, true
	err = m.Reconfigure(next)
	checkErrorLines(t, err, []string{`fleetwatch: Options.Resources[2].Name: "pods" is already configured by Options.Resources[0]`})
	var fe *informer.FieldError
	if !errors.As(err, &fe) || fe.Field != "Options.Resources[2].Name" {
		t.Errorf("the error holds %#v, want an informer.FieldError of Options.Resources[2].Name", fe)
	}

	if after := m.options(); !reflect.DeepEqual(after, before) {
		t.Errorf("the options changed:\n%+v\nwant\n%+v", after, before)
	}
	m.mu.Lock()
	mb := m.members["one"]
	m.mu.Unlock()
	var names []string
	for _, r := range mb.set.Status() {
		names = append(names, r.Name)
	}
	if want := []string{"pods", "configmaps"}; !reflect.DeepEqual(names, want) {
		t.Errorf("the cluster's informer set has the resources %q, want %q", names, want)
	}
	st, ok := m.ClusterStatus("one")
	if !ok || len(st.Resources) != 2 {
		t.Errorf("status of the cluster: %+v, %v; want its two resources", st, ok)
	}
}

// options returns the options that Reconfigure changes, as the Manager holds them.
func (m *Manager) options() Options {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Options{
		Clusters:           m.opts.Clusters,
		Resources:          m.opts.Resources,
		SyncTimeout:        m.opts.SyncTimeout,
		MaxConcurrentSyncs: m.opts.MaxConcurrentSyncs,
		KeepManagedFields:  m.opts.KeepManagedFields,
		KeepSecretData:     m.opts.KeepSecretData,
		SnapshotWriter:     m.opts.SnapshotWriter,
	}
}
