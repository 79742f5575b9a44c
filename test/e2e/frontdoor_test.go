package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// rawGet sends "GET path" with the Host header host and, if not empty, a bearer token,
// written as they are on a new connection to addr, as a browser under DNS rebinding
// would send it. It returns the status code, the headers and the body.
func rawGet(t *testing.T, addr, host, path, token string) (int, http.Header, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nOrigin: http://%[2]s\r\nConnection: close\r\n", path, host)
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", path, host, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, string(body)
}

// TestDaemonFrontDoor runs `fleetwatch serve` against a real cluster and checks what
// the API tells clients that should not learn much: a web page reaching the default
// loopback server through DNS rebinding gets 403 (and no CORS headers), a probe without a
// token learns whether the daemon is ready but not which clusters hold it back, and a
// token file that does not parse is reported without its tokens.
func TestDaemonFrontDoor(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Names: []string{"inventory-prod"}})
	createPod(t, env.Clusters[0], "default", "app")
	bin := buildBinary(t, "./cmd/fleetwatch")
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, env.Clusters...); err != nil {
		t.Fatal(err)
	}
	// A cluster that never answers: its port is closed.
	const offline = "offline-payments"
	offlineKubeconfig := filepath.Join(dir, "offline.kubeconfig")
	if err := os.WriteFile(offlineKubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}}]
users: [{name: offline, user: {token: not-a-secret}}]
contexts: [{name: %s, context: {cluster: offline, user: offline}}]
current-context: %[2]s
`, freePort(t), offline)), 0o600); err != nil {
		t.Fatal(err)
	}
	writeConfig := func(name, server string, kubeconfigs ...string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		quoted := make([]string, len(kubeconfigs))
		for i, k := range kubeconfigs {
			quoted[i] = strconv.Quote(k)
		}
		cfg := fmt.Sprintf("kubeconfig: [%s]\nresources: [{name: pods}]\nsnapshot: {path: \"\"}\nsync: {timeout: 10s}\nserver:\n%s", strings.Join(quoted, ", "), server)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	t.Run("DNS rebinding", func(t *testing.T) {
		port := freePort(t)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		d := startDaemon(t, bin, writeConfig("loopback.yaml", fmt.Sprintf("  address: %s\n  acceptHosts: ['fleetwatch\\.test']\n", addr), kubeconfig))
		waitReadyz(t, http.DefaultClient, "http://"+addr)
		pods := "/clusters/*/api/v1/pods"
		for _, tc := range []struct {
			host, path string
			code       int
		}{
			{fmt.Sprintf("attacker.example:%d", port), pods, http.StatusForbidden},
			{"attacker.example:8080", "/apis/fleetwatch.io/v1alpha1/clusters", http.StatusForbidden},
			{"attacker.example:8080", "/readyz?verbose", http.StatusForbidden},
			{"fleetwatch.test.attacker.example", pods, http.StatusForbidden},
			{fmt.Sprintf("localhost:%d", port), pods, http.StatusOK},
			{fmt.Sprintf("127.0.0.1:%d", port), pods, http.StatusOK},
			{fmt.Sprintf("[::1]:%d", port), pods, http.StatusOK},
			{fmt.Sprintf("fleetwatch.test:%d", port), pods, http.StatusOK},
		} {
			code, header, body := rawGet(t, addr, tc.host, tc.path, "")
			if code != tc.code {
				t.Errorf("Host %s, GET %s: %d %.300s, want %d", tc.host, tc.path, code, body, tc.code)
			}
			for name := range header {
				if strings.HasPrefix(strings.ToLower(name), "access-control-") {
					t.Errorf("Host %s, GET %s: CORS header %s: %s", tc.host, tc.path, name, header.Get(name))
				}
			}
			switch code {
			case http.StatusOK:
				if tc.path == pods && !strings.Contains(body, `"app"`) {
					t.Errorf("Host %s: the pods of the fleet are not served: %.300s", tc.host, body)
				}
			case http.StatusForbidden:
				var st metav1.Status
				if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" || st.Reason != metav1.StatusReasonForbidden {
					t.Errorf("Host %s: not a Forbidden Status: %s", tc.host, body)
				}
				if strings.Contains(body, "inventory-prod") || strings.Contains(body, `"app"`) {
					t.Errorf("Host %s: the 403 shows the fleet: %s", tc.host, body)
				}
			}
		}
		if err := d.signal(t, syscall.SIGTERM); err != nil {
			t.Errorf("exit: %v", err)
		}
	})

	t.Run("readyz without a token", func(t *testing.T) {
		const token = "ops-5d41402abc4b2a76b9719d911017c592"
		tokens := filepath.Join(dir, "tokens")
		if err := os.WriteFile(tokens, []byte(token+" user=ops\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		d := startDaemon(t, bin, writeConfig("tokens.yaml", fmt.Sprintf("  address: %s\n  auth: {tokenFile: %q}\n", addr, tokens), kubeconfig, offlineKubeconfig))

		eventually(t, 60*time.Second, "/livez", func() string {
			res, err := http.Get("http://" + addr + "/livez")
			if err != nil {
				return err.Error()
			}
			res.Body.Close()
			return ""
		})
		// The offline cluster holds readiness back for sync.timeout (10s): meanwhile a
		// probe learns that, and no cluster name; the token names the cluster.
		sawWithheld := false
		eventually(t, 60*time.Second, "/readyz with the token names the offline cluster", func() string {
			code, _, body := rawGet(t, addr, "localhost", "/readyz?verbose", "")
			if code == http.StatusServiceUnavailable && strings.Contains(body, "[-]fleet failed: reason withheld") {
				sawWithheld = true
			}
			if strings.Contains(body, offline) || strings.Contains(body, "inventory-prod") {
				t.Fatalf("/readyz without a token names a cluster: %d %s", code, body)
			}
			code, _, body = rawGet(t, addr, "localhost", "/readyz?verbose", token)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, `"`+offline+`"`) || strings.Contains(body, "inventory-prod") {
				return fmt.Sprintf("%d %s", code, body)
			}
			return ""
		})
		if !sawWithheld {
			t.Errorf("/readyz without a token never said reason withheld")
		}
		// Past sync.timeout the probe, with the Host that the deployment's probes send,
		// passes.
		eventually(t, 60*time.Second, "/readyz without a token passes", func() string {
			code, _, body := rawGet(t, addr, "localhost", "/readyz", "")
			if code != http.StatusOK || body != "ok" {
				return fmt.Sprintf("%d %s", code, body)
			}
			return ""
		})
		// With a token file the host is not checked: the token protects the API.
		if code, _, body := rawGet(t, addr, "attacker.example", "/clusters/*/api/v1/pods", ""); code != http.StatusUnauthorized {
			t.Errorf("without a token, for another host: %d %s", code, body)
		}
		if err := d.signal(t, syscall.SIGTERM); err != nil {
			t.Errorf("exit: %v", err)
		}
		if logs := readLog(t, d); strings.Contains(logs, token) {
			t.Errorf("the log shows the token")
		}
	})

	t.Run("token file that does not parse", func(t *testing.T) {
		const secret = "s3cret-7f9c2ba4e88f827d616045507605853e"
		tokens := filepath.Join(dir, "bad-tokens")
		if err := os.WriteFile(tokens, []byte("# two tokens on line 2\nfirst-token "+secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(t.Context(), bin, "serve", "--config", writeConfig("bad.yaml", fmt.Sprintf("  address: 127.0.0.1:%d\n  auth: {tokenFile: %q}\n", freePort(t), tokens), kubeconfig))
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("serve did not fail: %v\n%s", err, out)
		}
		if want := tokens + ":2: field 2 is not key=value"; !strings.Contains(string(out), want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
		if strings.Contains(string(out), secret) || strings.Contains(string(out), "first-token") {
			t.Errorf("the output shows a token:\n%s", out)
		}
	})
}
