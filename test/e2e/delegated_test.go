package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// TestDaemonDelegatedAuthorization runs `fleetwatch serve` over a fleet of 200 clusters
// (200 kubeconfig contexts of one real apiserver, each a cluster with its own name and
// informers), with authentication and authorization delegated to a second real
// apiserver, the home cluster. It checks that:
//   - a user granted the 200 clusters one by one with resourceNames lists all of them,
//     quickly, and that the answers are cached;
//   - a token meant for another audience than the configured one is rejected;
//   - random tokens cost one TokenReview each, and none when sent again;
//   - while the home cluster does not answer, a list that needs a review fails with an
//     error Status instead of leaving clusters out, and a watch that was already
//     authorized keeps receiving events meanwhile.
func TestDaemonDelegatedAuthorization(t *testing.T) {
	t.Parallel()
	const clusters = 200
	env := testenv.New(t, testenv.Options{Names: []string{"home", "remote"}})
	ctx := t.Context()
	home, remote := env.Clusters[0], env.Clusters[1]
	createPod(t, remote, "default", "app")

	dir := t.TempDir()
	all := env.KubeconfigFor(remote)
	kc := clientcmdapi.NewConfig()
	kc.AuthInfos, kc.Clusters = all.AuthInfos, all.Clusters
	var names []string
	for i := range clusters {
		name := fmt.Sprintf("c-%03d", i)
		names = append(names, name)
		kc.Contexts[name] = &clientcmdapi.Context{Cluster: remote.Name, AuthInfo: "admin"}
	}
	kc.CurrentContext = names[0]
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	homeKubeconfig := filepath.Join(dir, "home.kubeconfig")
	if err := env.WriteKubeconfig(homeKubeconfig, home); err != nil {
		t.Fatal(err)
	}

	// Users of the home cluster: many may read the 200 clusters, each by name; watcher
	// every cluster; cold 5 clusters by name.
	cs := home.Clientset()
	token := func(sa string, audiences ...string) string {
		t.Helper()
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: audiences},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	grant := func(sa string, resourceNames []string) {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		role := "fleetwatch-" + sa
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: role},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"fleetwatch.io"}, Resources: []string{"clusters"}, ResourceNames: resourceNames, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: sa}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grant("many", names)
	grant("watcher", nil)
	grant("cold", names[:5])
	manyToken, watcherToken, coldToken := token("many", "fleetwatch"), token("watcher", "fleetwatch"), token("cold", "fleetwatch")
	homeAudienceToken := token("many")

	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfgPath := filepath.Join(dir, "fleetwatch.yaml")
	cfg := fmt.Sprintf(`kubeconfig: [%q]
resources: [{name: pods, namespaces: [default]}]
sync: {maxConcurrent: 32}
snapshot: {path: ""}
server:
  address: 127.0.0.1:%d
  auth:
    delegated: {enabled: true, kubeconfig: %q, audiences: [fleetwatch]}
`, kubeconfig, port, homeKubeconfig)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t, "./cmd/fleetwatch")
	startDaemon(t, bin, cfgPath)
	client := &http.Client{Timeout: 60 * time.Second}
	get := func(path, token string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	clustersOf := func(body []byte) map[string]bool {
		t.Helper()
		var list unstructured.UnstructuredList
		if err := list.UnmarshalJSON(body); err != nil {
			t.Fatalf("not a list: %v\n%.300s", err, body)
		}
		out := map[string]bool{}
		for _, it := range list.Items {
			out[it.GetAnnotations()["fleetwatch.io/cluster"]] = true
		}
		return out
	}
	reviews := func(resource string) float64 {
		t.Helper()
		m, err := home.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum("apiserver_request_total", map[string]string{"resource": resource})
	}
	// reviewsSince returns how many reviews of resource the home cluster counted since
	// before, once the count reaches want (the apiserver counts a request as its
	// handler returns, which can be just after its answer arrives), or after 5s.
	reviewsSince := func(resource string, before, want float64) float64 {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := reviews(resource) - before
			if got >= want || time.Now().After(deadline) {
				return got
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	start := time.Now()
	waitReadyz(t, client, base)
	eventually(t, 60*time.Second, "the pod of every cluster served", func() string {
		code, body := get("/clusters/*/api/v1/pods", watcherToken)
		if code != http.StatusOK {
			return fmt.Sprintf("%d %.300s", code, body)
		}
		if n := len(clustersOf(body)); n != clusters {
			return fmt.Sprintf("%d clusters", n)
		}
		return ""
	})
	t.Logf("200 clusters served %v after the start", time.Since(start).Round(time.Millisecond))

	// The watcher's watch starts now, before the home cluster is paused below.
	events := watchUntil(t.Context(), t, base+"/clusters/*/api/v1/pods?watch=true&resourceVersion=0", watcherToken)
	for range clusters {
		nextLine(t, events)
	}

	t.Run("200 clusters granted one by one", func(t *testing.T) {
		before := reviews("subjectaccessreviews")
		start := time.Now()
		code, body := get("/clusters/*/api/v1/pods", manyToken)
		took := time.Since(start)
		if code != http.StatusOK {
			t.Fatalf("%d %.300s", code, body)
		}
		if n := len(clustersOf(body)); n != clusters {
			t.Errorf("many sees the pods of %d clusters, want %d", n, clusters)
		}
		// One review of every cluster, then one per cluster; at client-go's default 5
		// a second, they would take 40s.
		sars := reviewsSince("subjectaccessreviews", before, clusters+1)
		t.Logf("first list of * by many: %v, %v SubjectAccessReviews", took.Round(time.Millisecond), sars)
		if sars != clusters+1 || took > 15*time.Second {
			t.Errorf("first list of * by many: %v SubjectAccessReviews in %v, want %d within 15s", sars, took, clusters+1)
		}
		before += sars
		if code, body := get("/clusters/*/api/v1/pods", manyToken); code != http.StatusOK || len(clustersOf(body)) != clusters {
			t.Errorf("second list of * by many: %d %.300s", code, body)
		}
		if sars := reviews("subjectaccessreviews") - before; sars != 0 {
			t.Errorf("the second list asked for %v SubjectAccessReviews, want none", sars)
		}
	})

	t.Run("audiences", func(t *testing.T) {
		if code, body := get("/clusters/*/api/v1/pods", homeAudienceToken); code != http.StatusUnauthorized {
			t.Errorf("a token for the home cluster's audience: %d %.300s", code, body)
		}
	})

	t.Run("random tokens", func(t *testing.T) {
		const n = 20
		random := make([]string, n)
		for i := range random {
			var b [24]byte
			_, _ = rand.Read(b[:])
			random[i] = hex.EncodeToString(b[:])
		}
		before := reviews("tokenreviews")
		for round := range 2 {
			for _, tok := range random {
				if code, body := get("/clusters/*/api/v1/pods", tok); code != http.StatusUnauthorized {
					t.Fatalf("a random token: %d %.300s", code, body)
				}
			}
			if got := reviewsSince("tokenreviews", before, n); got != n {
				t.Errorf("after round %d of %d random tokens: %v TokenReviews, want %d", round+1, n, got, n)
			}
		}
	})

	t.Run("home cluster paused", func(t *testing.T) {
		// cold's token is reviewed (cached for 10s), but none of its access is.
		if code, body := get("/version", coldToken); code != http.StatusOK {
			t.Fatalf("/version as cold: %d %.300s", code, body)
		}
		if err := home.PauseAPIServer(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := home.ResumeAPIServer(); err != nil {
				t.Error(err)
			}
		}()
		type result struct {
			code int
			body []byte
			took time.Duration
		}
		coldList := make(chan result, 1)
		go func() {
			start := time.Now()
			code, body := get("/clusters/*/api/v1/pods", coldToken)
			coldList <- result{code, body, time.Since(start)}
		}()

		// The list of cold waits for its reviews, which the home cluster does not
		// answer; the watcher's watch goes on meanwhile.
		createPod(t, remote, "default", "while-paused")
		seen := map[string]bool{}
		for len(seen) < clusters {
			var e struct {
				Type   string                    `json:"type"`
				Object unstructured.Unstructured `json:"object"`
			}
			if err := json.Unmarshal([]byte(nextLine(t, events)), &e); err != nil {
				t.Fatal(err)
			}
			if e.Type == "ADDED" && e.Object.GetName() == "while-paused" {
				seen[e.Object.GetAnnotations()["fleetwatch.io/cluster"]] = true
			}
		}
		select {
		case r := <-coldList:
			t.Errorf("cold's list was answered (%d after %v) before the watch got its events", r.code, r.took)
		default:
		}

		r := <-coldList
		var st metav1.Status
		if err := json.Unmarshal(r.body, &st); err != nil || r.code != http.StatusInternalServerError || st.Kind != "Status" ||
			st.Reason != metav1.StatusReasonInternalError || !strings.Contains(st.Message, "could not review whether system:serviceaccount:default:cold may") {
			t.Errorf("cold's list while the home cluster is paused: %d after %v: %.300s", r.code, r.took, r.body)
		}
		t.Logf("cold's list failed after %v: %s", r.took.Round(time.Millisecond), st.Message)
	})
}

// nextLine returns the next line of a watch, failing after 20s or at its end.
func nextLine(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("the watch ended")
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("no watch event within 20s")
	}
	return ""
}
