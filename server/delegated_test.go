package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/rest"
)

// fakeHome is a home cluster that answers TokenReviews and SubjectAccessReviews over
// HTTP as kube-apiserver does, from what the test grants.
type fakeHome struct {
	t   testing.TB
	url string
	// tokenReviews and accessReviews count the reviews asked for.
	tokenReviews, accessReviews atomic.Int32

	// mu guards the fields below.
	mu sync.Mutex
	// users maps tokens to their users.
	users map[string]string
	// audiences maps tokens to the audiences they are valid for; a token not listed is
	// valid for the home cluster's own, homeAudience.
	audiences map[string][]string
	// grants maps users to the cluster names they may read, "" standing for every
	// cluster, "/metrics" for /metrics, and "state:NAME" for the state of cluster NAME
	// (clusters/state, which "" does not cover).
	grants map[string][]string
	// fail makes the SubjectAccessReviews of a user fail with 500, and failTokens every
	// TokenReview.
	fail       map[string]bool
	failTokens bool
	// hold makes SubjectAccessReviews wait until the channel is closed: those of a
	// user about a cluster, keyed "USER CLUSTER". held receives their keys when they
	// start waiting.
	hold map[string]chan struct{}
	held chan string
	// lastAudiences are the audiences of the last TokenReview.
	lastAudiences []string
}

const homeAudience = "https://kubernetes.default.svc"

func newFakeHome(t testing.TB) *fakeHome {
	h := &fakeHome{
		t:         t,
		users:     map[string]string{},
		audiences: map[string][]string{},
		grants:    map[string][]string{},
		fail:      map[string]bool{},
		hold:      map[string]chan struct{}{},
		held:      make(chan string, 1000),
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

func (h *fakeHome) set(f func(h *fakeHome)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

func (h *fakeHome) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		h.tokenReviews.Add(1)
		h.mu.Lock()
		fail := h.failTokens
		h.mu.Unlock()
		if fail {
			h.failed(w)
			return
		}
		var tr authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.lastAudiences = tr.Spec.Audiences
		user, ok := h.users[tr.Spec.Token]
		valid := h.audiences[tr.Spec.Token]
		h.mu.Unlock()
		if valid == nil {
			valid = []string{homeAudience}
		}
		want := tr.Spec.Audiences
		if len(want) == 0 {
			want = []string{homeAudience}
		}
		var auds []string
		for _, a := range want {
			if slices.Contains(valid, a) {
				auds = append(auds, a)
			}
		}
		if ok && len(auds) > 0 {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: auds, User: authenticationv1.UserInfo{Username: user, Groups: []string{"system:authenticated"}}}
		} else {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		h.answer(w, "TokenReview", "authentication.k8s.io/v1", &tr)
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		h.accessReviews.Add(1)
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		user := sar.Spec.User
		what := "/metrics"
		if ra := sar.Spec.ResourceAttributes; ra != nil {
			if ra.Verb != "get" || ra.Group != GroupName || ra.Resource != "clusters" {
				h.t.Errorf("SubjectAccessReview of %+v", ra)
			}
			what = ra.Name
			if ra.Subresource != "" {
				what = ra.Subresource + ":" + ra.Name
			}
		}
		h.mu.Lock()
		hold, fail := h.hold[user+" "+what], h.fail[user]
		h.mu.Unlock()
		if hold != nil {
			h.held <- user + " " + what
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		if fail {
			h.failed(w)
			return
		}
		h.mu.Lock()
		sar.Status.Allowed = slices.Contains(h.grants[user], what) || what != "/metrics" && !strings.Contains(what, ":") && slices.Contains(h.grants[user], "")
		h.mu.Unlock()
		h.answer(w, "SubjectAccessReview", "authorization.k8s.io/v1", &sar)
	default:
		http.NotFound(w, r)
	}
}

func (h *fakeHome) failed(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusInternalServerError)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError})
}

func (h *fakeHome) answer(w http.ResponseWriter, kind, apiVersion string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		h.t.Errorf("encode %s: %v", kind, err)
		return
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	m["kind"], m["apiVersion"] = kind, apiVersion
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(m)
}

// newDelegatedFixture is newFixture with authentication delegated to a fake home
// cluster.
func newDelegatedFixture(t *testing.T, setOpts func(*DelegatedAuth)) (*fixture, *fakeHome) {
	home := newFakeHome(t)
	f := newFixture(t, func(o *Options) {
		// The fake home cluster speaks JSON only.
		o.Delegated = &DelegatedAuth{Config: &rest.Config{Host: home.url, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}}
		if setOpts != nil {
			setOpts(o.Delegated)
		}
	})
	return f, home
}

func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

func randomToken(t testing.TB) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TestDelegatedManyClusters grants a user 200 clusters one by one: a list of every
// cluster decides each of them before it reads the cache, and returns all of them; the
// decisions are cached.
func TestDelegatedManyClusters(t *testing.T) {
	f, home := newDelegatedFixture(t, nil)
	var granted []string
	for i := range 200 {
		name := fmt.Sprintf("c-%03d", i)
		granted = append(granted, name)
		f.src.setStatus(clusterStatus(name, "Synced", false))
		f.apply(name, podsGVR, pod("default", "web", "1", web))
	}
	f.sync()
	home.set(func(h *fakeHome) {
		h.users["many-token"] = "many"
		h.grants["many"] = granted
	})
	start := time.Now()
	var l itemList
	f.getOK(clusterPath(allClusters)+"/api/v1/pods", &l, bearer("many-token")...)
	took := time.Since(start)
	if len(l.Items) != 200 || slices.ContainsFunc(l.refs(), func(ref string) bool { return !strings.HasPrefix(ref, "c-") }) {
		t.Errorf("pods of * for many: %d %v", len(l.Items), l.refs())
	}
	// One review of every cluster, then one per cluster of the fleet (203).
	if got := home.accessReviews.Load(); got != 1+203 {
		t.Errorf("%d SubjectAccessReviews, want 204", got)
	}
	t.Logf("the first list of 200 clusters took %v", took)

	var w struct{ Items []Cluster }
	f.getOK("/apis/fleetwatch.io/v1alpha1/clusters", &w, bearer("many-token")...)
	f.getOK(clusterPath(allClusters)+"/api/v1/pods", &l, bearer("many-token")...)
	if len(w.Items) != 200 || len(l.Items) != 200 {
		t.Errorf("again: %d clusters, %d pods", len(w.Items), len(l.Items))
	}
	if got := home.accessReviews.Load(); got != 204 || home.tokenReviews.Load() != 1 {
		t.Errorf("cached answers were asked again: %d SubjectAccessReviews, %d TokenReviews", got, home.tokenReviews.Load())
	}
	if r := f.get(clusterPath(prod)+"/api/v1/pods", bearer("many-token")...); r.code != http.StatusForbidden {
		t.Errorf("prod for many: %d %s", r.code, r.body)
	}
}

// TestDelegatedReviewFails checks that a review that fails fails the request with an
// InternalError, rather than leave clusters out, and is not cached.
func TestDelegatedReviewFails(t *testing.T) {
	f, home := newDelegatedFixture(t, nil)
	home.set(func(h *fakeHome) {
		h.users["flaky-token"] = "flaky"
		h.grants["flaky"] = []string{prod, staging, "/metrics"}
		h.fail["flaky"] = true
	})
	for _, path := range []string{
		clusterPath(allClusters) + "/api/v1/pods",
		clusterPath(allClusters) + "/api/v1/pods?watch=true",
		clusterPath(allClusters) + "/api",
		clusterPath(prod) + "/api/v1/pods",
		"/apis/fleetwatch.io/v1alpha1/clusters",
		"/apis/fleetwatch.io/v1alpha1/clusters/" + prod,
		"/metrics",
	} {
		st := f.get(path, bearer("flaky-token")...).status(t, http.StatusInternalServerError)
		if st.Reason != metav1.StatusReasonInternalError || !strings.Contains(st.Message, "the home cluster could not review whether flaky may") {
			t.Errorf("%s: %+v", path, st)
		}
	}
	home.set(func(h *fakeHome) { h.fail["flaky"] = false })
	var l itemList
	f.getOK(clusterPath(allClusters)+"/api/v1/pods", &l, bearer("flaky-token")...)
	if got := strings.Join(l.refs(), " "); got != "prod|default/web-1 prod|default/web-2 prod|kube-system/dns-1 staging|default/api-1 staging|default/web-1" {
		t.Errorf("pods of * once the home cluster answers: %s", got)
	}

	// A TokenReview that fails is an InternalError too, not a 401 that would tell the
	// client its token is wrong; and it is not cached either.
	home.set(func(h *fakeHome) {
		h.users["later-token"] = "later"
		h.grants["later"] = []string{""}
		h.failTokens = true
	})
	st := f.get(clusterPath(prod)+"/api/v1/pods", bearer("later-token")...).status(t, http.StatusInternalServerError)
	if !strings.Contains(st.Message, "the home cluster could not review the bearer token") {
		t.Errorf("failed TokenReview: %+v", st)
	}
	home.set(func(h *fakeHome) { h.failTokens = false })
	if r := f.get(clusterPath(prod)+"/api/v1/pods", bearer("later-token")...); r.code != http.StatusOK {
		t.Errorf("once the home cluster answers: %d %s", r.code, r.body)
	}
}

// TestDelegatedSlowReviewStallsNoOne holds the review of one cluster for one user: the
// request waits for its answer without holding any lock, and the watches and lists of
// others go on. The cluster is one with cached objects but no status yet, as after a
// warm start, which the server reads only under the cache's locks.
func TestDelegatedSlowReviewStallsNoOne(t *testing.T) {
	f, home := newDelegatedFixture(t, nil)
	const orphan = "orphan"
	f.apply(orphan, podsGVR, pod("default", "web-1", "401", web))
	f.sync()
	release := make(chan struct{})
	home.set(func(h *fakeHome) {
		h.users["fast-token"], h.users["slow-token"] = "fast", "slow"
		h.grants["fast"] = []string{""}
		h.grants["slow"] = []string{staging, orphan}
		h.hold["slow "+orphan] = release
	})
	w := f.watch(clusterPath(allClusters)+"/api/v1/pods?watch=true&resourceVersion=0", bearer("fast-token")...)
	for range 7 {
		if e := w.nextNot("BOOKMARK"); e.Type != "ADDED" {
			t.Fatalf("initial event %s", e.ref())
		}
	}
	slow := make(chan response, 1)
	go func() { slow <- f.get(clusterPath(allClusters)+"/api/v1/pods", bearer("slow-token")...) }()
	select {
	case held := <-home.held:
		if held != "slow "+orphan {
			t.Fatalf("held %q", held)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the slow review was not asked for")
	}
	f.apply(staging, podsGVR, pod("default", "web-9", "209", web))
	if e := w.nextNot("BOOKMARK"); e.ref() != "ADDED staging|default/web-9" {
		t.Errorf("event while a review is held: %s", e.ref())
	}
	var l itemList
	f.getOK(clusterPath(allClusters)+"/api/v1/pods", &l, bearer("fast-token")...)
	if len(l.Items) != 8 {
		t.Errorf("list while a review is held: %v", l.refs())
	}
	select {
	case r := <-slow:
		t.Fatalf("the slow list was answered before its review: %d %s", r.code, r.body)
	default:
	}
	close(release)
	r := <-slow
	var sl itemList
	if err := json.Unmarshal(r.body, &sl); r.code != http.StatusOK || err != nil {
		t.Fatalf("the slow list: %d %s", r.code, r.body)
	}
	if got := strings.Join(sl.refs(), " "); got != "orphan|default/web-1 staging|default/api-1 staging|default/web-1 staging|default/web-9" {
		t.Errorf("the slow list: %s", got)
	}
}

// TestDelegatedTokenCache sends random tokens: each costs one TokenReview at most, and
// none when it comes again, however many requests send it at once; and a flood of them
// does not evict an accepted token.
func TestDelegatedTokenCache(t *testing.T) {
	f, home := newDelegatedFixture(t, nil)
	home.set(func(h *fakeHome) {
		h.users["good-token"] = "good"
		h.grants["good"] = []string{""}
	})
	// Fewer rejected tokens are kept than are sent, to see that they evict only each
	// other.
	f.server.delegated.rejected = utilcache.NewLRUExpireCache(8)
	if r := f.get(clusterPath(prod)+"/api/v1/pods", bearer("good-token")...); r.code != http.StatusOK {
		t.Fatalf("good token: %d %s", r.code, r.body)
	}
	tokens := make([]string, 8)
	for i := range tokens {
		tokens[i] = randomToken(t)
	}
	send := func(tokens []string, times int) {
		t.Helper()
		var wg sync.WaitGroup
		for _, tok := range tokens {
			for range times {
				wg.Go(func() {
					if r := f.get(clusterPath(prod)+"/api/v1/pods", bearer(tok)...); r.code != http.StatusUnauthorized {
						t.Errorf("random token: %d %s", r.code, r.body)
					}
				})
			}
		}
		wg.Wait()
	}
	send(tokens, 5)
	if got := home.tokenReviews.Load(); got != 1+8 {
		t.Errorf("%d TokenReviews for a good token and 8 random ones sent 5 times each, at once; want 9", got)
	}
	send(tokens, 1)
	if got := home.tokenReviews.Load(); got != 9 {
		t.Errorf("%d TokenReviews once the random tokens were sent again, want 9", got)
	}
	flood := make([]string, 40)
	for i := range flood {
		flood[i] = randomToken(t)
	}
	send(flood, 1)
	if r := f.get(clusterPath(prod)+"/api/v1/pods", bearer("good-token")...); r.code != http.StatusOK {
		t.Fatalf("good token after a flood: %d %s", r.code, r.body)
	}
	if got := home.tokenReviews.Load(); got != 9+40 {
		t.Errorf("%d TokenReviews after a flood of 40 random tokens, want 49: the good token was reviewed again", got)
	}
}

// TestDelegatedAudiences checks that the configured audiences are asked for, and that a
// token valid only for others is rejected.
func TestDelegatedAudiences(t *testing.T) {
	f, home := newDelegatedFixture(t, func(d *DelegatedAuth) { d.Audiences = []string{"fleetwatch", "fleetwatch-2"} })
	home.set(func(h *fakeHome) {
		h.users["ours"], h.users["theirs"] = "ours", "theirs"
		h.audiences["ours"] = []string{"fleetwatch"}
		h.grants["ours"], h.grants["theirs"] = []string{""}, []string{""}
	})
	if r := f.get(clusterPath(prod)+"/api/v1/pods", bearer("ours")...); r.code != http.StatusOK {
		t.Errorf("a token for fleetwatch: %d %s", r.code, r.body)
	}
	home.mu.Lock()
	asked := home.lastAudiences
	home.mu.Unlock()
	if !slices.Equal(asked, []string{"fleetwatch", "fleetwatch-2"}) {
		t.Errorf("TokenReview audiences %q", asked)
	}
	if r := f.get(clusterPath(prod)+"/api/v1/pods", bearer("theirs")...); r.code != http.StatusUnauthorized {
		t.Errorf("a token for the home cluster's own audience: %d %s", r.code, r.body)
	}
}

// TestDelegatedRateLimit checks the defaults of the review rate, and that QPS and Burst
// replace those of the home cluster's rest.Config.
func TestDelegatedRateLimit(t *testing.T) {
	opts := (&DelegatedAuth{Config: &rest.Config{}}).withDefaults()
	if opts.QPS != DefaultReviewQPS || opts.Burst != DefaultReviewBurst {
		t.Errorf("default QPS %v, Burst %d", opts.QPS, opts.Burst)
	}
	f, home := newDelegatedFixture(t, func(d *DelegatedAuth) {
		d.Config.QPS, d.Config.Burst = 1000, 1000
		d.QPS, d.Burst = 10, 1
	})
	home.set(func(h *fakeHome) {
		h.users["some-token"] = "some"
		h.grants["some"] = []string{prod, staging}
	})
	start := time.Now()
	var l itemList
	f.getOK(clusterPath(allClusters)+"/api/v1/pods", &l, bearer("some-token")...)
	// A TokenReview, then 1+3 SubjectAccessReviews: at 10 a second after the first,
	// at least 400ms.
	if took := time.Since(start); took < 400*time.Millisecond || home.tokenReviews.Load()+home.accessReviews.Load() != 5 {
		t.Errorf("5 reviews at 10 a second took %v", took)
	}
}
