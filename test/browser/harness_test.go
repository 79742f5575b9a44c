package browser

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// EnvChromium names the browser to drive; default: chromium on the PATH.
const EnvChromium = "FLEETWATCH_CHROMIUM"

// EnvScreenshots, when set, is the folder (relative to the repository) where the tests
// write screenshots of the page, as docs/screenshots.
const EnvScreenshots = "FLEETWATCH_SCREENSHOTS"

func repoPath(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join("..", "..", p)
}

// buildBinary builds the fleetwatch binary.
func buildBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "fleetwatch")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/fleetwatch")
	cmd.Dir = repoPath(".")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/fleetwatch: %v\n%s", err, b)
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// daemon is a running `fleetwatch serve`.
type daemon struct {
	name, bin, config string
	base              string
	cmd               *exec.Cmd
	log               *os.File
}

// startDaemon runs `fleetwatch serve` with the config that config gives for a free port.
// It is killed when the test ends.
func startDaemon(t *testing.T, bin, name string, config func(port int) string) *daemon {
	t.Helper()
	dir := t.TempDir()
	port := freePort(t)
	d := &daemon{name: name, bin: bin, config: filepath.Join(dir, "fleetwatch.yaml"), base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	if err := os.WriteFile(d.config, []byte(config(port)), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if d.log, err = os.Create(filepath.Join(dir, name+".log")); err != nil {
		t.Fatal(err)
	}
	d.start(t)
	t.Cleanup(func() {
		d.kill()
		d.log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(d.log.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (end):\n%s", name, b)
		}
	})
	return d
}

func (d *daemon) start(t *testing.T) {
	t.Helper()
	d.cmd = exec.Command(d.bin, "serve", "--config", d.config, "--log-verbosity", "2")
	d.cmd.Stderr = d.log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

// kill kills the daemon with SIGKILL and waits for it.
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
}

// waitReady waits until the daemon's /readyz passes and, where its clusters may be read
// without a token, none is served from the snapshot unconfirmed: a warm start is ready
// at once, and the tests compare with the servers.
func (d *daemon) waitReady(t *testing.T) {
	t.Helper()
	eventually(t, 90*time.Second, d.base+"/readyz", func() string {
		resp, err := http.Get(d.base + "/readyz")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("%d %s", resp.StatusCode, b)
		}
		resp, err = http.Get(d.base + "/apis/fleetwatch.io/v1alpha1/clusters")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ = io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"reason":"ServingSnapshot"`) {
			return "a cluster is served from the snapshot, unconfirmed"
		}
		return ""
	})
}

// get GETs a path of the daemon with a bearer token (none if empty).
func (d *daemon) get(t *testing.T, path, token string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, d.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return b
}

// eventually polls cond until it returns "", and fails the test with its last answer
// after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, timeout, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newBrowser starts a headless Chromium with a fresh profile, without any of the
// background connections that a closed network would make fail.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv(EnvChromium)
	if path == "" {
		var err error
		if path, err = exec.LookPath("chromium"); err != nil {
			t.Fatalf("no chromium on the PATH (hack/install-chromium.sh installs it; or set %s): %v", EnvChromium, err)
		}
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		chromedp.WindowSize(1280, 900),
		// attacker.test resolves to loopback, as a DNS-rebinding name would.
		chromedp.Flag("host-resolver-rules", "MAP attacker.test 127.0.0.1"),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// tab is a browser tab whose console and network responses are recorded for the whole
// test.
type tab struct {
	ctx context.Context

	// mu guards console and bodies.
	mu      sync.Mutex
	console []chromedp.ConsoleMessage
	// bodies are the bytes of every response the tab received, by request, streamed
	// ones (watches) as they arrive.
	bodies map[network.RequestID]*bytes.Buffer
	urls   map[network.RequestID]string
}

// newTab opens a tab in the browser of parent.
func newTab(t *testing.T, parent context.Context) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(parent)
	t.Cleanup(cancel)
	tb := &tab{ctx: ctx, bodies: map[network.RequestID]*bytes.Buffer{}, urls: map[network.RequestID]string{}}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}
	console := chromedp.Console(ctx)
	responses := chromedp.Events(ctx, network.ResponseReceived)
	data := chromedp.Events(ctx, network.DataReceived)
	finished := chromedp.Events(ctx, network.LoadingFinished)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.console = append(tb.console, m)
			tb.mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range responses {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.urls[ev.RequestID] = ev.Response.URL
			if tb.bodies[ev.RequestID] == nil {
				tb.bodies[ev.RequestID] = &bytes.Buffer{}
			}
			tb.mu.Unlock()
			if strings.Contains(ev.Response.URL, "watch=true") {
				// A watch does not finish while the page is open: its bytes come with
				// each dataReceived event once it streams.
				res, err := chromedp.Call(ctx, network.StreamResourceContent, network.StreamResourceContentParams{RequestID: ev.RequestID})
				if err == nil {
					tb.mu.Lock()
					tb.bodies[ev.RequestID].Write(res.BufferedData)
					tb.mu.Unlock()
				}
			}
		}
	}()
	go func() {
		for ev, err := range data {
			if err != nil {
				return
			}
			if len(ev.Data) > 0 {
				tb.mu.Lock()
				if tb.bodies[ev.RequestID] == nil {
					tb.bodies[ev.RequestID] = &bytes.Buffer{}
				}
				tb.bodies[ev.RequestID].Write(ev.Data)
				tb.mu.Unlock()
			}
		}
	}()
	go func() {
		for ev, err := range finished {
			if err != nil {
				return
			}
			res, err := chromedp.Call(ctx, network.GetResponseBody, network.GetResponseBodyParams{RequestID: ev.RequestID})
			if err != nil {
				continue // a streamed response, recorded as it came
			}
			tb.mu.Lock()
			b := tb.bodies[ev.RequestID]
			if b == nil {
				b = &bytes.Buffer{}
				tb.bodies[ev.RequestID] = b
			}
			if b.Len() == 0 {
				b.Write(res.Body)
			}
			tb.mu.Unlock()
		}
	}()
	return tb
}

// doTimeout bounds the actions of a do: a click waits for its node, which a page that
// does not show what is expected never shows.
const doTimeout = 30 * time.Second

// do runs actions in the tab.
func (tb *tab) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, doTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%v (the page shows: %s)", err, tb.shown())
	}
}

// shown returns the start of the text that the tab shows, for a failure's message.
func (tb *tab) shown() string {
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.body?.innerText ?? '').slice(0, 500)`))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return fmt.Sprintf("%q", s)
}

// eval evaluates a JavaScript expression in the tab, and the promise it gives, if any.
func eval[T any](t *testing.T, tb *tab, expr string) T {
	t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// wait runs body, the body of a JavaScript function that returns true once the page
// shows what is expected, and else what it shows, until it returns true.
func (tb *tab) wait(t *testing.T, timeout time.Duration, what, body string) {
	t.Helper()
	eventually(t, timeout, what, func() string {
		v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`(() => {
			const shown = (() => {`+body+`})();
			return shown === true ? '' : 'the page shows ' + JSON.stringify(shown);
		})()`))
		if err != nil {
			return err.Error()
		}
		return v
	})
}

// navigate loads url in the tab.
func (tb *tab) navigate(t *testing.T, url string) {
	t.Helper()
	tb.do(t, chromedp.Navigate(url))
}

// screenshot writes a screenshot of the page as name.png into $FLEETWATCH_SCREENSHOTS.
func (tb *tab) screenshot(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv(EnvScreenshots)
	if dir == "" {
		return
	}
	buf, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir = repoPath(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// messages returns the console messages of the tab so far that allowed does not accept.
func (tb *tab) messages(allowed func(chromedp.ConsoleMessage) bool) []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []string
	for _, m := range tb.console {
		if (m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException()) && (allowed == nil || !allowed(m)) {
			out = append(out, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
		}
	}
	return out
}

// received reports the responses the tab received that contain one of needles.
func (tb *tab) received(needles ...string) []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []string
	for id, b := range tb.bodies {
		for _, n := range needles {
			if bytes.Contains(b.Bytes(), []byte(n)) {
				out = append(out, fmt.Sprintf("%s holds %q", tb.urls[id], n))
			}
		}
	}
	return out
}

// responses returns the number of responses recorded, and the bytes they hold.
func (tb *tab) responses() (n, size int) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, b := range tb.bodies {
		size += b.Len()
	}
	return len(tb.bodies), size
}
