package e2e

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetwatch/fleetwatch/internal/testcert"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// TestDaemonAuth runs `fleetwatch serve` over TLS with a token file that limits some
// tokens to some clusters, and with authentication and authorization delegated to a
// real home cluster (TokenReview, SubjectAccessReview), against two real clusters. It
// checks who sees what, and that no credential reaches the logs, /metrics or the
// snapshot, and no Secret data the cache.
func TestDaemonAuth(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Names: []string{"home", "remote"}})
	ctx := t.Context()
	home := env.Clusters[0]
	for _, c := range env.Clusters {
		createPod(t, c, "default", "app-"+c.Name)
	}
	// Secrets are cached only when configured, and then without their data.
	const secretValue = "hunter2-do-not-cache"
	if _, err := home.Clientset().CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Labels: map[string]string{"app": "db"}},
		StringData: map[string]string{"password": secretValue},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Two service accounts of the home cluster: reader may read the cluster remote and
	// /metrics through RBAC; stranger may read nothing.
	cs := home.Clientset()
	saToken := func(name string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	readerToken, strangerToken := saToken("reader"), saToken("stranger")
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "fleetwatch-remote-reader"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"fleetwatch.io"}, Resources: []string{"clusters"}, ResourceNames: []string{"remote"}, Verbs: []string{"get"}},
			{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fleetwatch-remote-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "fleetwatch-remote-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "reader"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	homeKubeconfig := filepath.Join(dir, "home.kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, env.Clusters...); err != nil {
		t.Fatal(err)
	}
	if err := env.WriteKubeconfig(homeKubeconfig, home); err != nil {
		t.Fatal(err)
	}
	const opsToken, ciToken = "ops-0123456789abcdef", "ci-0123456789abcdef"
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# token file\n"+opsToken+" user=ops\n"+ciToken+" user=ci clusters=home\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := testcert.Write(t, dir, "tls")
	pool := testcert.Pool(t, certFile)
	port := freePort(t)
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	cfgPath := filepath.Join(dir, "fleetwatch.yaml")
	cfg := fmt.Sprintf(`kubeconfig: [%q]
resources: [{name: pods}, {name: secrets}]
snapshot: {path: %q, interval: 100ms}
server:
  address: 127.0.0.1:%d
  tls: {certFile: %q, keyFile: %q}
  auth:
    tokenFile: %q
    delegated: {enabled: true, kubeconfig: %q}
`, kubeconfig, filepath.Join(dir, "fleetwatch.db"), port, certFile, keyFile, tokens, homeKubeconfig)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t, "./cmd/fleetwatch")
	d := startDaemon(t, bin, cfgPath)

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(path, token string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	waitReadyz(t, client, base)
	// podsOf returns the pods of "*", or nil if no cluster that the token may read
	// serves pods (404, as for a fleet without clusters).
	podsOf := func(token string) []string {
		t.Helper()
		code, body := get("/clusters/*/api/v1/pods", token)
		if code == http.StatusNotFound {
			return nil
		}
		if code != http.StatusOK {
			t.Errorf("pods of * : %d %s", code, body)
			return nil
		}
		var list unstructured.UnstructuredList
		if err := list.UnmarshalJSON(body); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range list.Items {
			out = append(out, it.GetAnnotations()["fleetwatch.io/cluster"]+"/"+it.GetName())
		}
		slices.Sort(out)
		return out
	}
	eventually(t, 30*time.Second, "both pods served", func() string {
		if got := podsOf(opsToken); !slices.Equal(got, []string{"home/app-home", "remote/app-remote"}) {
			return fmt.Sprint(got)
		}
		return ""
	})

	for _, tc := range []struct {
		who, token string
		// pods are what "*" lists; the codes are of /clusters/home, /clusters/remote and
		// /metrics.
		pods                  []string
		home, remote, metrics int
		unauthenticated       bool
	}{
		{who: "no token", unauthenticated: true},
		{who: "wrong token", token: "ops-0123456789abcdeX", unauthenticated: true},
		{who: "token file, every cluster", token: opsToken, pods: []string{"home/app-home", "remote/app-remote"}, home: 200, remote: 200, metrics: 200},
		{who: "token file, clusters=home", token: ciToken, pods: []string{"home/app-home"}, home: 200, remote: 403, metrics: 403},
		{who: "delegated, RBAC for remote", token: readerToken, pods: []string{"remote/app-remote"}, home: 403, remote: 200, metrics: 200},
		{who: "delegated, no RBAC", token: strangerToken, pods: nil, home: 403, remote: 403, metrics: 403},
		{who: "delegated, a token the home cluster rejects", token: readerToken[:len(readerToken)-4] + "AAAA", unauthenticated: true},
	} {
		t.Run(tc.who, func(t *testing.T) {
			if tc.unauthenticated {
				for _, p := range []string{"/clusters/*/api/v1/pods", "/clusters/home/api/v1/pods", "/metrics", "/apis/fleetwatch.io/v1alpha1/clusters"} {
					if code, body := get(p, tc.token); code != http.StatusUnauthorized {
						t.Errorf("%s: %d %s", p, code, body)
					}
				}
				return
			}
			if got := podsOf(tc.token); !slices.Equal(got, tc.pods) {
				t.Errorf("pods of *: %v, want %v", got, tc.pods)
			}
			for path, want := range map[string]int{"/clusters/home/api/v1/pods": tc.home, "/clusters/remote/api/v1/pods": tc.remote, "/metrics": tc.metrics} {
				code, body := get(path, tc.token)
				if code != want {
					t.Errorf("%s: %d %.200s, want %d", path, code, body, want)
				}
				if code == http.StatusForbidden {
					var st metav1.Status
					if err := json.Unmarshal(body, &st); err != nil || st.Reason != metav1.StatusReasonForbidden {
						t.Errorf("%s: not a Forbidden Status: %s", path, body)
					}
				}
			}
		})
	}

	t.Run("secrets without their data", func(t *testing.T) {
		code, body := get("/clusters/home/api/v1/namespaces/default/secrets/db", opsToken)
		var secret corev1.Secret
		if code != http.StatusOK || json.Unmarshal(body, &secret) != nil {
			t.Fatalf("get secret: %d %s", code, body)
		}
		if secret.Labels["app"] != "db" || len(secret.Data) != 0 || len(secret.StringData) != 0 {
			t.Errorf("secret as served: %s", body)
		}
	})

	t.Run("kubectl with a delegated token", func(t *testing.T) {
		out := kubectl(t, "--server", base+"/clusters/*", "--certificate-authority", certFile, "--token", readerToken, "get", "pods", "-A")
		if !strings.Contains(out, "app-remote") || strings.Contains(out, "app-home") {
			t.Errorf("kubectl get pods -A as reader:\n%s", out)
		}
	})

	t.Run("no credential in logs or metrics", func(t *testing.T) {
		_, metrics := get("/metrics", opsToken)
		if err := d.signal(t, syscall.SIGTERM); err != nil {
			t.Errorf("exit: %v", err)
		}
		logs, err := os.ReadFile(d.log.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(metrics), "fleetwatch_") || !strings.Contains(string(logs), "Serving") {
			t.Fatalf("nothing to check: logs %.200s, metrics %.200s", logs, metrics)
		}
		secrets := map[string]string{
			"the clusters' bearer token": env.Token(), "ops token": opsToken, "ci token": ciToken,
			"reader's service account token": readerToken, "stranger's service account token": strangerToken,
		}
		snapshot, err := os.ReadFile(filepath.Join(dir, "fleetwatch.db"))
		if err != nil || !strings.Contains(string(snapshot), "app-remote") {
			t.Fatalf("no snapshot to check: %v", err)
		}
		secrets["secret's value"] = secretValue
		secrets["secret's value, base64"] = base64.StdEncoding.EncodeToString([]byte(secretValue))
		for what, data := range map[string][]byte{"logs": logs, "/metrics": metrics, "snapshot": snapshot} {
			for name, secret := range secrets {
				if strings.Contains(string(data), secret) {
					t.Errorf("the %s appears in the daemon's %s", name, what)
				}
			}
		}
	})
}

// TestDaemonRefusesInsecureAddress starts `fleetwatch serve` on every interface without
// TLS or authentication: it must refuse to start, and say why.
func TestDaemonRefusesInsecureAddress(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t, "./cmd/fleetwatch")
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"0.0.0.0 without TLS or tokens", []string{"--server-address", "0.0.0.0:0"}, []string{
			`server.tls.certFile: required because server.address "0.0.0.0:0" is not a loopback address`,
			`server.auth.tokenFile: required (or server.auth.delegated.enabled)`,
		}},
		{"0.0.0.0 with tokens, without TLS", []string{"--server-address", "0.0.0.0:0", "--server-auth-token-file", filepath.Join(dir, "tokens")}, []string{
			`server.tls.keyFile: required because server.address "0.0.0.0:0" is not a loopback address`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), bin, append([]string{"serve", "--snapshot-path", ""}, tc.args...)...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(dir, "none"))
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("serve did not fail: %v\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output does not say %q:\n%s", w, out)
				}
			}
			if strings.Contains(string(out), "Serving") {
				t.Errorf("it served:\n%s", out)
			}
		})
	}
}
