package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// Sizes of the load test: a Table of every pod of the fleet with includeObject=Object is
// about 4 MB, and more clients ask for it at once than the daemon serves.
const (
	loadPodsPerCluster = 150
	loadAnnotationSize = 12 << 10
	loadClients        = 120
	loadDuration       = 15 * time.Second
	// loadRSSBound is the peak RSS that the daemon must stay under, the bound that
	// docs/deploy.md ("Sizing") documents for the default limits. Before Tables were
	// streamed, each of these requests held its whole body, and the daemon's RSS grew
	// to gigabytes under this load.
	loadRSSBound = 256 << 20
	// loadMaxWatches is server.limits.maxWatches in this test.
	loadMaxWatches = 4
)

// TestDaemonUnderLoad runs `fleetwatch serve` against two real clusters with a few MB of
// pods, and has loadClients clients ask for the largest answer it gives (a Table of every
// pod of the fleet, with the objects) as fast as it serves them, for loadDuration. The
// daemon must stay under loadRSSBound, refuse what is beyond server.limits with 429 and
// Retry-After, keep answering its probes at once, serve the lists of another client
// (within client-go's retries, which honor Retry-After), and keep a watch going.
func TestDaemonUnderLoad(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Names: []string{"load-a", "load-b"}})
	ctx := t.Context()
	for _, c := range env.Clusters {
		seedBulkPods(ctx, t, c)
	}
	quiet := env.Clusters[1]
	createConfigMap(t, quiet.Clientset(), "quiet", "before-load", quiet.Name)

	dir := t.TempDir()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfgPath := filepath.Join(dir, "fleetwatch.yaml")
	// server.limits.maxRequestsInFlight keeps its default: the bound is documented for it.
	cfg := fmt.Sprintf(`kubeconfig: [%q]
resources:
  - name: pods
  - name: configmaps
snapshot:
  path: ""
server:
  address: 127.0.0.1:%d
  limits:
    maxWatches: %d
`, env.Kubeconfig, port, loadMaxWatches)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, buildBinary(t, "./cmd/fleetwatch"), cfgPath)
	waitReadyz(t, http.DefaultClient, base)
	pid := d.cmd.Process.Pid

	tableURL := base + "/clusters/*/api/v1/pods?includeObject=Object"
	const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"
	eventually(t, 60*time.Second, "every pod in the daemon's Table", func() string {
		var table metav1.Table
		n, code, err := getInto(ctx, http.DefaultClient, tableURL, tableAccept, &table)
		if err != nil || code != http.StatusOK {
			return fmt.Sprintf("%d %v", code, err)
		}
		if len(table.Rows) < 2*loadPodsPerCluster {
			return fmt.Sprintf("%d rows", len(table.Rows))
		}
		t.Logf("the Table of every pod with includeObject=Object: %d rows, %.1f MB", len(table.Rows), float64(n)/1e6)
		return ""
	})

	// A watch that starts before the load must see what happens during it.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchURL := base + "/clusters/" + quiet.Name + "/api/v1/namespaces/quiet/configmaps?watch=true"
	events := watchUntil(watchCtx, t, watchURL, "")

	t.Run("watches beyond server.limits.maxWatches get 429", func(t *testing.T) {
		var stops []context.CancelFunc
		for range loadMaxWatches - 1 {
			c, stop := context.WithCancel(ctx)
			watchUntil(c, t, watchURL, "")
			stops = append(stops, stop)
		}
		res := get(ctx, t, http.DefaultClient, watchURL, "")
		checkTooManyRequests(t, res)
		for _, stop := range stops {
			stop()
		}
	})

	idle := rss(t, pid)
	t.Logf("RSS before the load: %d MiB (peak so far %d MiB)", idle.current>>20, idle.peak>>20)

	loadCtx, stopLoad := context.WithTimeout(ctx, loadDuration)
	defer stopLoad()
	var (
		served, refused, bytes atomic.Int64
		badRetryAfter          atomic.Int64
		other                  = &otherClient{}
	)
	g, gctx := errgroup.WithContext(loadCtx)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: loadClients}}
	for range loadClients {
		g.Go(func() error {
			for gctx.Err() == nil {
				req, _ := http.NewRequestWithContext(gctx, http.MethodGet, tableURL, nil)
				req.Header.Set("Accept", tableAccept)
				res, err := client.Do(req)
				if err != nil {
					if gctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("a Table request: %w", err)
				}
				n, err := io.Copy(io.Discard, res.Body)
				res.Body.Close()
				switch {
				case gctx.Err() != nil:
					return nil
				case res.StatusCode == http.StatusTooManyRequests:
					refused.Add(1)
					after, err := strconv.Atoi(res.Header.Get("Retry-After"))
					if err != nil || after != 1 {
						badRetryAfter.Add(1)
						after = 1
					}
					// Honor Retry-After, as client-go does.
					select {
					case <-time.After(time.Duration(after) * time.Second):
					case <-gctx.Done():
					}
				case res.StatusCode != http.StatusOK || err != nil:
					return fmt.Errorf("a Table request: %d after %d bytes: %v", res.StatusCode, n, err)
				default:
					served.Add(1)
					bytes.Add(n)
				}
			}
			return nil
		})
	}
	// Samplers: the daemon's RSS, its probes, another client's lists.
	var peak atomic.Int64
	var probes, probeFailures atomic.Int64
	var probeMax atomic.Int64
	var samplers sync.WaitGroup
	samplers.Go(func() {
		for loadCtx.Err() == nil {
			if m := rss(t, pid); m.current > peak.Load() {
				peak.Store(m.current)
			}
			sleepCtx(loadCtx, 100*time.Millisecond)
		}
	})
	samplers.Go(func() {
		probe := &http.Client{Timeout: 5 * time.Second}
		for loadCtx.Err() == nil {
			for _, path := range []string{"/readyz", "/livez", "/healthz"} {
				start := time.Now()
				res, err := probe.Get(base + path)
				if took := time.Since(start); int64(took) > probeMax.Load() {
					probeMax.Store(int64(took))
				}
				probes.Add(1)
				if err != nil {
					probeFailures.Add(1)
					t.Errorf("%s during the load: %v", path, err)
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					probeFailures.Add(1)
					t.Errorf("%s during the load: %d", path, res.StatusCode)
				}
			}
			sleepCtx(loadCtx, 200*time.Millisecond)
		}
	})
	samplers.Go(func() { other.run(loadCtx, t, base+"/clusters/"+quiet.Name) })

	// A change during the load reaches the watch that started before it.
	sleepCtx(loadCtx, loadDuration/3)
	createConfigMap(t, quiet.Clientset(), "quiet", "during-load", quiet.Name)
	sawChange := false
	for !sawChange {
		select {
		case line, ok := <-events:
			if !ok {
				t.Fatal("the watch ended during the load")
			}
			sawChange = strings.Contains(line, `"during-load"`) && strings.Contains(line, `"ADDED"`)
		case <-loadCtx.Done():
			t.Fatal("the watch did not get the ADDED event of a ConfigMap created during the load")
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	samplers.Wait()
	final := rss(t, pid)

	t.Logf("%d clients for %v: %d Tables served (%.0f MB), %d refused with 429; another client: %d lists, %d of its requests refused; %d probes, slowest %v",
		loadClients, loadDuration, served.Load(), float64(bytes.Load())/1e6, refused.Load(), other.lists.Load(), other.refused.Load(),
		probes.Load(), time.Duration(probeMax.Load()).Round(time.Millisecond))
	t.Logf("RSS: %d MiB before the load, %d MiB at most during it (sampled), peak of the process %d MiB; bound %d MiB",
		idle.current>>20, peak.Load()>>20, final.peak>>20, loadRSSBound>>20)
	if final.peak > loadRSSBound {
		t.Errorf("the daemon's peak RSS %d MiB is over the bound of %d MiB", final.peak>>20, loadRSSBound>>20)
	}
	if served.Load() == 0 || refused.Load() == 0 {
		t.Errorf("%d Tables served and %d refused: the load did not reach the limit", served.Load(), refused.Load())
	}
	if badRetryAfter.Load() > 0 {
		t.Errorf("%d responses 429 without Retry-After: 1", badRetryAfter.Load())
	}
	if other.lists.Load() == 0 || other.failed.Load() > 0 {
		t.Errorf("another client's lists during the load: %d served, %d failed", other.lists.Load(), other.failed.Load())
	}
	if probes.Load() == 0 || probeFailures.Load() > 0 {
		t.Errorf("%d probes, %d failed", probes.Load(), probeFailures.Load())
	}
	// Every 429 is counted: the load's large lists, and the watch beyond the limit.
	res := get(ctx, t, http.DefaultClient, base+"/metrics", "")
	rejected := map[string]float64{}
	for line := range strings.SplitSeq(grepLines(res.body, "fleetwatch_http_requests_rejected_total{"), "\n") {
		reason, value, _ := strings.Cut(strings.TrimPrefix(line, `fleetwatch_http_requests_rejected_total{reason="`), `"} `)
		rejected[reason], _ = strconv.ParseFloat(value, 64)
	}
	if got := rejected["LargeLists"] + rejected["MaxRequestsInFlight"]; got < float64(refused.Load()+other.refused.Load()) || rejected["MaxWatches"] != 1 {
		t.Errorf("/metrics counts %v rejected requests, want at least %d lists and 1 watch", rejected, refused.Load()+other.refused.Load())
	}
}

// seedBulkPods creates loadPodsPerCluster pods in the namespace bulk of c, each with an
// annotation of loadAnnotationSize bytes.
func seedBulkPods(ctx context.Context, t *testing.T, c *testenv.Cluster) {
	t.Helper()
	cs := c.Clientset()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bulk"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	filler := strings.Repeat("x", loadAnnotationSize)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range loadPodsPerCluster {
		g.Go(func() error {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bulk-%03d", i), Annotations: map[string]string{"example.com/filler": filler}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example.com/bulk:1"}}},
			}
			_, err := cs.CoreV1().Pods("bulk").Create(gctx, pod, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("creating pods in %s: %v", c.Name, err)
	}
}

// otherClient lists ConfigMaps of one cluster with client-go, over and over, as a client
// that is not part of the load: client-go retries a 429 after its Retry-After, up to 10
// times, so each list must succeed.
type otherClient struct {
	lists, failed, refused atomic.Int64
}

func (o *otherClient) run(ctx context.Context, t *testing.T, host string) {
	cfg := &rest.Config{Host: host}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			res, err := rt.RoundTrip(req)
			if err == nil && res.StatusCode == http.StatusTooManyRequests {
				o.refused.Add(1)
			}
			return res, err
		})
	})
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Error(err)
		return
	}
	cms := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("quiet")
	for ctx.Err() == nil {
		// Each list may take the whole of client-go's retries, past the load's end.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		l, err := cms.List(lctx, metav1.ListOptions{})
		cancel()
		switch {
		case err != nil:
			o.failed.Add(1)
			t.Errorf("another client's list during the load: %v", err)
		case len(l.Items) == 0:
			o.failed.Add(1)
			t.Errorf("another client's list during the load is empty")
		default:
			o.lists.Add(1)
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// rssSample is a process's resident set size, now and at its peak.
type rssSample struct{ current, peak int64 }

// rss reads VmRSS and VmHWM of a process from /proc.
func rss(t *testing.T, pid int) rssSample {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Errorf("reading the daemon's memory: %v", err)
		return rssSample{}
	}
	var m rssSample
	for line := range strings.SplitSeq(string(b), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || name != "VmRSS" && name != "VmHWM" {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			t.Errorf("/proc/%d/status: %q: %v", pid, line, err)
		}
		if name == "VmRSS" {
			m.current = kb << 10
		} else {
			m.peak = kb << 10
		}
	}
	return m
}

// watchUntil starts a watch, with a bearer token if token is not empty, and returns its
// lines; the channel is closed when the watch ends, ctx is done, or the test ends.
func watchUntil(ctx context.Context, t *testing.T, url, token string) <-chan string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Fatalf("watch %s: %d %s", url, res.StatusCode, body)
	}
	t.Cleanup(func() { res.Body.Close() })
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return lines
}

// httpResponse is a response read whole.
type httpResponse struct {
	code   int
	header http.Header
	body   []byte
}

func get(ctx context.Context, t *testing.T, client *http.Client, url, accept string) httpResponse {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return httpResponse{code: res.StatusCode, header: res.Header, body: body}
}

// getInto gets url and decodes its JSON into v, returning the size of the body.
func getInto(ctx context.Context, client *http.Client, url, accept string, v any) (int, int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", accept)
	res, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, res.StatusCode, err
	}
	return len(body), res.StatusCode, json.Unmarshal(body, v)
}

// checkTooManyRequests checks a 429 as kube-apiserver sends it: Retry-After: 1 and a
// Status with reason TooManyRequests.
func checkTooManyRequests(t *testing.T, res httpResponse) {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(res.body, &st); err != nil {
		t.Fatalf("%d: not a Status: %v\n%s", res.code, err, res.body)
	}
	if res.code != http.StatusTooManyRequests || st.Reason != metav1.StatusReasonTooManyRequests || st.Code != http.StatusTooManyRequests ||
		st.Details == nil || st.Details.RetryAfterSeconds != 1 || res.header.Get("Retry-After") != "1" {
		t.Errorf("want 429 TooManyRequests with Retry-After 1, got %d, Retry-After %q: %s", res.code, res.header.Get("Retry-After"), res.body)
	}
}

func grepLines(b []byte, substr string) string {
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// sleepCtx sleeps for d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
