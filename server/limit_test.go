package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// TestLimitRequestsInFlight holds requests in flight inside the server's limiter and
// checks what the next ones get.
func TestLimitRequestsInFlight(t *testing.T) {
	const maxInFlight = 2
	f := newFixture(t, func(o *Options) { o.MaxRequestsInFlight = maxInFlight })
	// The server's own chain, with requests that have ?block held inside the limit until
	// release is closed.
	entered, release := make(chan struct{}), make(chan struct{})
	h := f.server.metrics.instrument(f.server.limits.limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("block") {
			entered <- struct{}{}
			<-release
		}
		f.server.route(w, r)
	})))
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	get := func(path string) response {
		t.Helper()
		return getURL(t, http.DefaultClient, ts.URL+path)
	}
	pods := clusterPath(allClusters) + "/api/v1/pods"
	held := make(chan response, maxInFlight)
	for range maxInFlight {
		go func() {
			res, err := http.Get(ts.URL + pods + "?block")
			if err != nil {
				held <- response{}
				return
			}
			defer res.Body.Close()
			_, _ = io.Copy(io.Discard, res.Body)
			held <- response{code: res.StatusCode}
		}()
		<-entered
	}

	for _, path := range []string{pods, clusterPath(prod) + "/api/v1/namespaces/default/pods/web-1", clusterPath(prod) + "/api", "/version"} {
		t.Run("over the limit: "+path, func(t *testing.T) {
			r := get(path)
			st := r.status(t, http.StatusTooManyRequests)
			if st.Reason != metav1.StatusReasonTooManyRequests || st.Details == nil || st.Details.RetryAfterSeconds != 1 {
				t.Errorf("Status %+v, want reason TooManyRequests and retryAfterSeconds 1", st)
			}
			if got := r.header.Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After %q, want 1", got)
			}
			if !strings.Contains(st.Message, fmt.Sprint(maxInFlight)) {
				t.Errorf("message %q does not say the limit", st.Message)
			}
		})
	}
	t.Run("probes and metrics are exempt", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/livez", "/readyz", "/metrics"} {
			if r := get(path); r.code != http.StatusOK {
				t.Errorf("%s: %d %s", path, r.code, r.body)
			}
		}
		m := get("/metrics").body
		for _, sample := range []string{
			fmt.Sprintf("fleetwatch_http_requests_in_flight %d", maxInFlight),
			`fleetwatch_http_requests_rejected_total{reason="MaxRequestsInFlight"} 4`,
			`fleetwatch_http_requests_total{code="429",resource="",verb="other"} 4`,
		} {
			name, want, _ := strings.Cut(sample, " ")
			if !containsMetric(m, name, func(v float64) bool { return fmt.Sprint(v) == want }) {
				t.Errorf("metrics lack %s", sample)
			}
		}
	})
	t.Run("watches are counted apart", func(t *testing.T) {
		w := f.watchURL(ts.URL + clusterPath(prod) + "/api/v1/pods?watch=true")
		if e := w.next(); e.Type != "ADDED" {
			t.Errorf("first event %s", e.Type)
		}
		w.stop()
	})

	close(release)
	for range maxInFlight {
		if r := <-held; r.code != http.StatusOK {
			t.Errorf("a held request got %d", r.code)
		}
	}
	t.Run("a slot freed serves the next request", func(t *testing.T) {
		var l itemList
		r := get(pods)
		if r.code != http.StatusOK {
			t.Fatalf("after release: %d %s", r.code, r.body)
		}
		if err := json.Unmarshal(r.body, &l); err != nil || len(l.Items) != 6 {
			t.Errorf("after release: %d items, %v", len(l.Items), err)
		}
		if !containsMetric(get("/metrics").body, "fleetwatch_http_requests_in_flight", func(v float64) bool { return v == 0 }) {
			t.Errorf("requests in flight after release is not 0")
		}
	})
}

// TestLimitWatches fills the watches and checks that one more is refused, that lists
// are still served, and that a watch that ends frees its place.
func TestLimitWatches(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxWatches = 2 })
	path := clusterPath(prod) + "/api/v1/pods?watch=1"
	w1, w2 := f.watch(path), f.watch(path)
	w1.next()
	w2.next()

	r := f.get(clusterPath(allClusters) + "/api/v1/pods?watch=true&resourceVersion=0")
	st := r.status(t, http.StatusTooManyRequests)
	if st.Reason != metav1.StatusReasonTooManyRequests || r.header.Get("Retry-After") != "1" {
		t.Errorf("a watch over the limit: %s, Retry-After %q", r.body, r.header.Get("Retry-After"))
	}
	if r := f.get(clusterPath(allClusters) + "/api/v1/pods"); r.code != http.StatusOK {
		t.Errorf("a list while the watches are full: %d %s", r.code, r.body)
	}
	if !containsMetric(f.get("/metrics").body, `fleetwatch_http_requests_rejected_total{reason="MaxWatches"}`, func(v float64) bool { return v == 1 }) {
		t.Errorf("rejected watches are not counted")
	}

	w1.stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := f.get(path + "&timeoutSeconds=1")
		if r.code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a watch that ended did not free its place: %d %s", r.code, r.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLimitWatchesPerClient checks that a client, a user or else an address, cannot
// take more than its share of the watches.
func TestLimitWatchesPerClient(t *testing.T) {
	path := clusterPath(prod) + "/api/v1/pods?watch=1"
	t.Run("users", func(t *testing.T) {
		tokens := writeFile(t, t.TempDir(), "tokens", "alice-token user=alice\nbob-token user=bob\n")
		f := newFixture(t, func(o *Options) { o.TokenFile, o.MaxWatchesPerClient = tokens, 1 })
		alice, bob := []string{"Authorization", "Bearer alice-token"}, []string{"Authorization", "Bearer bob-token"}
		w := f.watch(path, alice...)
		w.next()
		r := f.get(path, alice...)
		if st := r.status(t, http.StatusTooManyRequests); st.Reason != metav1.StatusReasonTooManyRequests || r.header.Get("Retry-After") != "1" ||
			!strings.Contains(st.Message, "at most 1 watches of one client") {
			t.Errorf("a second watch of alice: %s, Retry-After %q", r.body, r.header.Get("Retry-After"))
		}
		f.watch(path, bob...).next()
		if r := f.get(clusterPath(prod)+"/api/v1/pods", alice...); r.code != http.StatusOK {
			t.Errorf("a list of alice while she has her watch: %d %s", r.code, r.body)
		}
		w.stop()
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := f.get(path+"&timeoutSeconds=1", alice...)
			if r.code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a watch of alice that ended did not free her place: %d %s", r.code, r.body)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !containsMetric(f.get("/metrics", bob...).body, `fleetwatch_http_requests_rejected_total{reason="MaxWatchesPerClient"}`, func(v float64) bool { return v >= 1 }) {
			t.Errorf("rejected watches of a client are not counted")
		}
	})
	t.Run("addresses", func(t *testing.T) {
		f := newFixture(t, func(o *Options) { o.MaxWatchesPerClient = 2 })
		f.watch(path).next()
		f.watch(path).next()
		f.get(path).status(t, http.StatusTooManyRequests)
	})
}

// TestLimitClientGoRetries checks that client-go, as kubectl uses it, retries a 429 after
// its Retry-After and gets its list.
func TestLimitClientGoRetries(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxRequestsInFlight = 1 })
	entered, release := make(chan struct{}), make(chan struct{})
	h := f.server.limits.limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("block") {
			close(entered)
			<-release
		}
		f.server.route(w, r)
	}))
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	go func() {
		if res, err := http.Get(ts.URL + "/version?block"); err == nil {
			res.Body.Close()
		}
	}()
	<-entered
	time.AfterFunc(500*time.Millisecond, func() { close(release) })

	dyn := dynamic.NewForConfigOrDie(&rest.Config{Host: ts.URL + clusterPath(allClusters)})
	start := time.Now()
	l, err := dyn.Resource(podsGVR).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("client-go did not get the list after a 429: %v", err)
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("client-go got the list after %v: it did not wait for Retry-After", took)
	}
	if len(l.Items) != 6 {
		t.Errorf("%d items, want 6", len(l.Items))
	}
}

// bulkFixture is a fixture with 2000 more pods in prod, of 2 KB each, served by a server
// whose connections have small socket buffers, so that it blocks in its writes long
// before it has sent a list of them (4 MB) to a client that stops reading. client
// reads through small buffers too.
func bulkFixture(t *testing.T, setOpts func(*Options)) (f *fixture, ts *httptest.Server, client *http.Client) {
	f = newFixture(t, setOpts)
	big := strings.Repeat("x", 2000)
	for i := range 2000 {
		p := pod("bulk", fmt.Sprintf("pod-%04d", i), fmt.Sprint(1000+i), nil)
		p.SetAnnotations(map[string]string{"bulk": big})
		f.apply(prod, podsGVR, p)
	}
	f.sync()
	ts = httptest.NewUnstartedServer(f.server.Handler())
	ts.Listener = smallBuffers{ts.Listener}
	ts.Start()
	t.Cleanup(ts.Close)
	client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
		}
		return c, err
	}}}
	t.Cleanup(client.CloseIdleConnections)
	return f, ts, client
}

// stalledList starts a list of url and reads only its start; the list stays in flight
// until the response is closed.
func stalledList(t *testing.T, client *http.Client, url, accept string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	req.Header.Set("Accept", accept)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d", url, res.StatusCode)
	}
	if _, err := io.ReadFull(res.Body, make([]byte, 4<<10)); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestListClientGone checks that a client that stops reading a long list holds its place
// only until it goes away.
func TestListClientGone(t *testing.T) {
	_, ts, client := bulkFixture(t, func(o *Options) { o.MaxRequestsInFlight = 1 })
	list := ts.URL + clusterPath(allClusters) + "/api/v1/pods"
	for _, accept := range []string{"application/json", acceptTable} {
		t.Run(accept, func(t *testing.T) {
			res := stalledList(t, client, list+"?includeObject=Object", accept)
			// The list is in flight: the next request is refused.
			if r := getURL(t, client, ts.URL+"/version"); r.code != http.StatusTooManyRequests {
				t.Fatalf("while a list is in flight: %d, want 429", r.code)
			}
			res.Body.Close() // mid-stream: the transport closes the connection
			deadline := time.Now().Add(10 * time.Second)
			for {
				r := getURL(t, http.DefaultClient, ts.URL+"/version")
				if r.code == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the list of a client that went away still holds its place: %d %s", r.code, r.body)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestLimitLargeLists checks that large lists take at most half of the places, and that
// the other requests are served meanwhile.
func TestLimitLargeLists(t *testing.T) {
	f, ts, client := bulkFixture(t, func(o *Options) { o.MaxRequestsInFlight = 4 })
	large := ts.URL + clusterPath(allClusters) + "/api/v1/pods"
	for range 2 {
		res := stalledList(t, client, large, acceptTable)
		defer res.Body.Close()
	}
	r := getURL(t, http.DefaultClient, large)
	if st := r.status(t, http.StatusTooManyRequests); r.header.Get("Retry-After") != "1" || !strings.Contains(st.Message, "lists of more than 100 objects") {
		t.Errorf("a third large list: %s, Retry-After %q", r.body, r.header.Get("Retry-After"))
	}
	for _, path := range []string{clusterPath(prod) + "/api/v1/namespaces/default/pods", clusterPath(prod) + "/api/v1/pods?limit=100", "/version"} {
		if r := getURL(t, http.DefaultClient, ts.URL+path); r.code != http.StatusOK {
			t.Errorf("%s while large lists hold half the places: %d %s", path, r.code, r.body)
		}
	}
	if !containsMetric(f.get("/metrics").body, `fleetwatch_http_requests_rejected_total{reason="LargeLists"}`, func(v float64) bool { return v == 1 }) {
		t.Errorf("the refused large list is not counted")
	}
}

// getURL gets a full URL with client, and reads the response whole.
func getURL(t *testing.T, client *http.Client, url string) response {
	t.Helper()
	res, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: res.StatusCode, header: res.Header, body: body}
}

// smallBuffers is a listener whose connections have a small send buffer.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}
