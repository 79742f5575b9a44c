package informer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// pathRecorder records the path of every request of the clients of a rest.Config, in
// order.
type pathRecorder struct {
	mu    sync.Mutex
	paths []string
}

func (p *pathRecorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		p.mu.Lock()
		p.paths = append(p.paths, req.URL.Path)
		p.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

func (p *pathRecorder) get() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.paths)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func isDiscovery(path string) bool { return path == "/api" || path == "/apis" }

// TestBuiltinKindsResolveAsDiscovery: each name of builtinKinds resolves without
// discovery to what a real kube-apiserver's discovery resolves it to.
func TestBuiltinKindsResolveAsDiscovery(t *testing.T) {
	env := testenv.New(t, testenv.Options{Clusters: 1})
	s, err := New(Options{Cluster: "c", Config: env.Clusters[0].RESTConfig(), Resources: []Resource{{Name: "pods"}}, Sink: nopSink{}})
	if err != nil {
		t.Fatal(err)
	}
	discovered, err := s.discoverUnconditionally(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name, k := range builtinKinds {
		names = append(names, name)
		if k.group != "" {
			names = append(names, name+"."+k.group)
		}
	}
	for _, name := range names {
		if !builtinOnly([]string{name}) {
			t.Errorf("%q is not taken as built in", name)
		}
		want, err := resolve(discovered, name)
		if err != nil {
			t.Errorf("%s: discovery: %v", name, err)
			continue
		}
		got, err := resolve(builtinMapper, name)
		if err != nil || got != want {
			t.Errorf("%s resolves without discovery to %+v (%v), want %+v", name, got, err, want)
		}
	}
	// Short names, singulars, other groups' and versions' forms, and names that
	// discovery alone resolves are left to it.
	for _, name := range []string{"pod", "po", "deploy", "deployment", "pods.v1.", "deployments.v1.apps", "deployments.extensions", "events.events.k8s.io", "pods.apps", "flowschemas", "widgets"} {
		if builtinOnly([]string{name}) {
			t.Errorf("%q is taken as built in: only the plural names of builtinKinds are, alone or with their group", name)
		}
	}
}

// TestBuiltinResourcesListBeforeDiscovery: a Set of built-in resources lists them
// before any discovery request, against a real kube-apiserver, and reads discovery at
// its next reconcile; a Set with another resource reads discovery first.
func TestBuiltinResourcesListBeforeDiscovery(t *testing.T) {
	env := testenv.New(t, testenv.Options{Clusters: 1})
	start := func(names ...string) (*Set, *pathRecorder) {
		t.Helper()
		rec := &pathRecorder{}
		cfg := env.Clusters[0].RESTConfig()
		cfg.Wrap(rec.wrap)
		var resources []Resource
		for _, n := range names {
			resources = append(resources, Resource{Name: n})
		}
		s, err := New(Options{Cluster: strings.Join(names, "+"), Config: cfg, Resources: resources, Sink: storeSink{}, DiscoveryInterval: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		s.Launch(t.Context(), func(error) {})
		eventually(t, "the Set synced", s.HasSynced)
		return s, rec
	}

	s, rec := start("pods", "configmaps", "deployments", "jobs.batch")
	paths := rec.get()
	first := slices.IndexFunc(paths, isDiscovery)
	if first < 0 {
		first = len(paths)
	}
	for _, list := range []string{"/api/v1/pods", "/api/v1/configmaps", "/apis/apps/v1/deployments", "/apis/batch/v1/jobs"} {
		if !slices.Contains(paths[:first], list) {
			t.Errorf("a Set of built-in resources read discovery before it listed %s: %q", list, paths)
		}
	}
	want := map[string]schema.GroupVersionResource{
		"pods":        {Version: "v1", Resource: "pods"},
		"configmaps":  {Version: "v1", Resource: "configmaps"},
		"deployments": {Group: "apps", Version: "v1", Resource: "deployments"},
		"jobs.batch":  {Group: "batch", Version: "v1", Resource: "jobs"},
	}
	for _, st := range s.Status() {
		if st.Mapping.Resource != want[st.Name] {
			t.Errorf("%s is mapped to %v, want %v", st.Name, st.Mapping.Resource, want[st.Name])
		}
	}
	eventually(t, "discovery read at the next reconcile", func() bool { return slices.ContainsFunc(rec.get(), isDiscovery) })

	_, rec = start("pods", "flowschemas")
	if paths := rec.get(); len(paths) == 0 || !isDiscovery(paths[0]) {
		t.Errorf("a Set with a resource that is not built in did not read discovery first: %q", paths)
	}
}

// TestRefusingClusterGivesBackItsSlot: a cluster whose apiserver answers every request
// with 401 or 403 (its credentials expired, its RBAC removed) gives its slot back as
// one that does not answer does (TestUnreachableClusterGivesBackItsSlot); one that
// answers 500 keeps it until SyncTimeout, retrying its list within it.
func TestRefusingClusterGivesBackItsSlot(t *testing.T) {
	for _, tc := range []struct {
		code     int
		giveBack bool
	}{{http.StatusUnauthorized, true}, {http.StatusForbidden, true}, {http.StatusInternalServerError, false}} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: int32(tc.code), Reason: metav1.StatusReason(http.StatusText(tc.code))}
				switch tc.code {
				case http.StatusUnauthorized:
					st.Reason = metav1.StatusReasonUnauthorized
				case http.StatusForbidden:
					st.Reason = metav1.StatusReasonForbidden
				default:
					st.Reason = metav1.StatusReasonInternalError
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.code)
				_ = json.NewEncoder(w).Encode(st)
			}))
			defer srv.Close()
			s, l := startWithTheOnlySlot(t, "refusing", &rest.Config{Host: srv.URL})
			if !tc.giveBack {
				// It keeps the slot after its lists failed, not only before.
				eventually(t, "a list failed", func() bool { return s.Status()[0].LastError != nil })
			}
			if got := slotGivenBack(t, l, 3*time.Second); got != tc.giveBack {
				t.Fatalf("slot given back: %v, want %v (last error: %v)", got, tc.giveBack, s.Status()[0].LastError)
			}
		})
	}
}

func TestRefusedOrUnanswered(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
		{fmt.Errorf("failed to list pods: %w", apierrors.NewUnauthorized("expired")), true},
		{fmt.Errorf("failed to list pods: %w", apierrors.NewForbidden(gr, "", errors.New("rbac"))), true},
		{apierrors.NewInternalError(errors.New("etcd")), false},
		{apierrors.NewTooManyRequests("slow down", 1), false},
		{apierrors.NewNotFound(gr, ""), false},
	} {
		if got := refusedOrUnanswered(tc.err); got != tc.want {
			t.Errorf("refusedOrUnanswered(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
