package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
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
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetwatch/fleetwatch/internal/testcert"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/server"
	"github.com/fleetwatch/fleetwatch/shard"
)

// secureFleet is what the replicas of a secure sharded fleet share: a serving
// certificate (its own CA), delegated authentication with the home cluster, and the
// replicas' ServiceAccount, whose token is their credential with the home cluster and
// with each other.
type secureFleet struct {
	certFile, keyFile string
	// replicaKubeconfig reaches the home cluster with the replicas' token.
	replicaKubeconfig string
	client            *http.Client
	// readerToken may read every cluster, prodToken only the first member; neither may
	// read a state.
	readerToken, prodToken string
}

func (s *secureFleet) get(ctx context.Context, url, token string) (int, []byte) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := s.client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, body
}

// newSecureShardedFleet is newShardedFleet whose replicas serve HTTPS, authenticate
// through the home cluster, and hand clusters over warm, as deploy/components/sharded
// with server.auth.delegated sets them up: the replicas' ServiceAccount has the Role of
// deploy/components/sharded/role.yaml in the namespace of the Leases.
func newSecureShardedFleet(t *testing.T, members int) *shardedFleet {
	f := newShardedFleet(t, members)
	ctx := t.Context()
	cs := f.home.Clientset()
	certFile, keyFile := testcert.Write(t, f.dir, "fleetwatch")
	s := &secureFleet{certFile: certFile, keyFile: keyFile}
	s.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: testcert.Pool(t, certFile)}}}

	account := func(name string, rules ...rbacv1.PolicyRule) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts("fleetwatch").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RbacV1().Roles("fleetwatch").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RbacV1().RoleBindings("fleetwatch").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "fleetwatch", Name: name}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("fleetwatch").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	clusterReader := func(name string, names ...string) string {
		t.Helper()
		tok := account(name)
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "fleetwatch-" + name},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"fleetwatch.io"}, Resources: []string{"clusters"}, ResourceNames: names, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "fleetwatch-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "fleetwatch-" + name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "fleetwatch", Name: name}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return tok
	}
	replicaToken := account("fleetwatch",
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
		rbacv1.PolicyRule{APIGroups: []string{"fleetwatch.io"}, Resources: []string{"clusters/state"}, Verbs: []string{"get"}})
	s.readerToken = clusterReader("reader")
	s.prodToken = clusterReader("prod-reader", f.members[0].Name)

	kc := f.env.KubeconfigFor(f.home)
	kc.AuthInfos = map[string]*clientcmdapi.AuthInfo{"replica": {Token: replicaToken}}
	kc.Contexts[f.home.Name].AuthInfo = "replica"
	s.replicaKubeconfig = filepath.Join(f.dir, "replica.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, s.replicaKubeconfig); err != nil {
		t.Fatal(err)
	}
	f.warm = s
	return f
}

// stopReplica stops the replica id with SIGTERM, as a scale-down does: it hands its
// clusters over to their new owners.
func (f *shardedFleet) stopReplica(id string) {
	f.t.Helper()
	if err := f.replicas[id].signal(f.t, syscall.SIGTERM); err != nil {
		f.t.Errorf("%s exited with %v", id, err)
	}
}

// listed returns the configmaps that each member's apiserver handed out as lists or
// initial events (docs/design.md, "Measuring").
func (f *shardedFleet) listed() map[string]float64 {
	f.t.Helper()
	out := map[string]float64{}
	for _, m := range f.members {
		ms, err := m.Metrics(f.t.Context())
		if err != nil {
			f.t.Fatal(err)
		}
		out[m.Name] = ms.ListedObjects("", "configmaps")
	}
	return out
}

// lists returns the lists of configmaps that m's apiserver served since since, a LIST
// or a streaming one, by its audit log.
func (f *shardedFleet) lists(m *testenv.Cluster, since time.Time) []string {
	var out []string
	reqs, _ := m.Requests()
	for _, req := range reqs {
		if req.Resource == "configmaps" && !req.Start.Before(since) && (req.Verb == "list" || strings.Contains(req.URI, "sendInitialEvents=true")) {
			out = append(out, req.Verb+" "+req.URI+" by "+req.UserAgent)
		}
	}
	return out
}

// placed waits until each member is watched by its owner among live, as its audit log
// tells, without listing anything itself (the check of the served objects against the
// servers lists them).
func (f *shardedFleet) placed(live ...string) {
	f.t.Helper()
	names := make([]string, len(f.members))
	for i, m := range f.members {
		names[i] = m.Name
	}
	assigned := shard.Assign(names, live)
	eventually(f.t, shardSettle, "the members watched by their owners", func() string {
		w := f.watchers(time.Now())
		for _, m := range f.members {
			if !slices.Equal(w[m.Name], []string{assigned[m.Name]}) {
				return fmt.Sprintf("%s is watched by %v, want %s", m.Name, w[m.Name], assigned[m.Name])
			}
		}
		return ""
	})
}

// movedWarm checks that each member that moved from one set of replicas to the other
// was started by its new owner without a list since since, and returns how many moved.
func (f *shardedFleet) movedWarm(before, after []string, since time.Time) int {
	t := f.t
	t.Helper()
	moved := 0
	for _, m := range f.members {
		from, to := shard.Owner(m.Name, before), shard.Owner(m.Name, after)
		if from == to {
			continue
		}
		moved++
		reqs, err := m.Requests()
		if err != nil {
			t.Fatal(err)
		}
		resumed := 0
		for _, req := range reqs {
			if replicaOf(req) != to || req.Resource != "configmaps" || req.Start.Before(since) {
				continue
			}
			if req.Verb == "list" || strings.Contains(req.URI, "sendInitialEvents=true") {
				t.Errorf("%s moved from %s to %s: %s %s; want the watch resumed from the handed-over state", m.Name, from, to, req.Verb, req.URI)
			} else {
				resumed++
			}
		}
		if resumed == 0 {
			t.Errorf("%s moved from %s to %s: no watch of %s", m.Name, from, to, to)
		}
		t.Logf("%s moved from %s to %s warm", m.Name, from, to)
	}
	return moved
}

// stateOnlyForReplicas tries the state endpoint of each replica in live as an attacker
// would: no credential, a guessed token, a reader of every cluster, a reader of the
// cluster. (A state is kept until the replica that takes the cluster acknowledges it,
// or for HandoverOptions.Keep: by then none is left there.)
func (f *shardedFleet) stateOnlyForReplicas(live []string) {
	f.t.Helper()
	for _, tc := range []struct{ name, token string }{
		{"no token", ""}, {"a guessed token", "guess"}, {"a reader of every cluster", f.warm.readerToken}, {"a reader of the cluster", f.warm.prodToken},
	} {
		for _, id := range live {
			code, body := f.warm.get(f.t.Context(), f.replicas[id].base+server.StatePath(f.members[0].Name), tc.token)
			if code != http.StatusUnauthorized && code != http.StatusForbidden {
				f.t.Errorf("%s: the state of %s at %s: %d %s; want 401 or 403", tc.name, f.members[0].Name, id, code, body)
			}
		}
	}
}
