package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "create", "update"}},
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

// TestShardedWarmHandover scales a secure sharded fleet 2 → 3 → 2 with configmaps
// changing throughout. The clusters that move are started by their new owner from the
// old owner's state: their apiservers see no list of configmaps from it, neither a LIST
// nor a streaming one, only watches resumed from the old owner's resourceVersions, and
// the fleet served equals the servers' truth afterwards, the changes made during the
// move included. The state endpoint answers no one but a replica.
func TestShardedWarmHandover(t *testing.T) {
	f := newSecureShardedFleet(t, 3)
	// Objects that never change: a cold start lists them again, a warm one does not.
	const unchanged = 100
	var wg sync.WaitGroup
	for _, m := range f.members {
		wg.Go(func() {
			for i := range unchanged {
				createConfigMap(t, m.Clientset(), "shop", fmt.Sprintf("unchanged-%d", i), m.Name)
			}
		})
	}
	wg.Wait()
	churn := startChurn(t, f.members)
	ids := []string{"fleetwatch-0", "fleetwatch-1", "fleetwatch-2"}
	for _, id := range ids[:2] {
		f.start(id)
	}
	t.Logf("2 replicas settled in %v", f.waitSettled(churn, ids[:2]...))

	// warm checks that each member that moved from one set of replicas to the other
	// was started by its new owner without a list since since.
	warm := func(before, after []string, since time.Time) int {
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

	// listed returns the configmaps that each member's apiserver handed out as lists
	// (docs/design.md, "Measuring"); placed waits until each member is watched by its
	// owner among live, as its audit log tells, without listing anything itself (the
	// check of the served objects against the servers lists them).
	listed := func() map[string]float64 {
		t.Helper()
		out := map[string]float64{}
		for _, m := range f.members {
			ms, err := m.Metrics(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			out[m.Name] = ms.ListedObjects("", "configmaps")
		}
		return out
	}
	placed := func(live ...string) {
		t.Helper()
		names := make([]string, len(f.members))
		for i, m := range f.members {
			names[i] = m.Name
		}
		assigned := shard.Assign(names, live)
		eventually(t, shardSettle, "the members watched by their owners", func() string {
			w := f.watchers(time.Now())
			for _, m := range f.members {
				if !slices.Equal(w[m.Name], []string{assigned[m.Name]}) {
					return fmt.Sprintf("%s is watched by %v, want %s", m.Name, w[m.Name], assigned[m.Name])
				}
			}
			return ""
		})
	}
	notListed := func(before map[string]float64, since time.Time) {
		t.Helper()
		for _, m := range f.members {
			ms, err := m.Metrics(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			// A watch resumed from a resourceVersion gets the changes since as its initial
			// events, which apiserver_init_events_total counts: those made during the move.
			n := ms.ListedObjects("", "configmaps") - before[m.Name]
			t.Logf("%s handed out %v configmaps as lists or initial events during the move: the changes made meanwhile (%d never changed)", m.Name, n, unchanged)
			if n >= unchanged {
				var lists []string
				reqs, _ := m.Requests()
				for _, req := range reqs {
					if req.Resource == "configmaps" && !req.Start.Before(since) && (req.Verb == "list" || strings.Contains(req.URI, "sendInitialEvents=true")) {
						lists = append(lists, req.Verb+" "+req.URI+" by "+req.UserAgent)
					}
				}
				t.Errorf("%s handed out %v configmaps as lists or initial events during the move, more than the changes made meanwhile; lists: %v", m.Name, n, lists)
			}
		}
	}

	from := time.Now()
	before := listed()
	f.start(ids[2])
	placed(ids...)
	notListed(before, from)
	t.Logf("3 replicas settled in %v", f.waitSettled(churn, ids...))
	up := warm(ids[:2], ids, from)

	// The state endpoint, as an attacker tries it, on a replica: no credential, a
	// reader of every cluster, a reader of one cluster, a guessed token. (A state is
	// given once, to the replica that takes the cluster: none is left here.)
	for _, tc := range []struct{ name, token string }{
		{"no token", ""}, {"a guessed token", "guess"}, {"a reader of every cluster", f.warm.readerToken}, {"a reader of the cluster", f.warm.prodToken},
	} {
		for _, id := range ids {
			code, body := f.warm.get(t.Context(), f.replicas[id].base+server.StatePath(f.members[0].Name), tc.token)
			if code != http.StatusUnauthorized && code != http.StatusForbidden {
				t.Errorf("%s: the state of %s at %s: %d %s; want 401 or 403", tc.name, f.members[0].Name, id, code, body)
			}
		}
	}

	from = time.Now()
	before = listed()
	if err := f.replicas[ids[2]].signal(t, syscall.SIGTERM); err != nil {
		t.Errorf("%s exited with %v", ids[2], err)
	}
	placed(ids[:2]...)
	notListed(before, from)
	t.Logf("2 replicas settled in %v", f.waitSettled(churn, ids[:2]...))
	down := warm(ids, ids[:2], from)
	if up+down == 0 {
		t.Fatal("no cluster moved; pick other names")
	}
	// The replicas' logs say so too (and may tell of more: a cluster that the first
	// replica took before the second joined moved warm too).
	took := 0
	for _, id := range ids {
		b, err := os.ReadFile(f.replicas[id].log.Name())
		if err != nil {
			t.Fatal(err)
		}
		took += strings.Count(string(b), "Took the cluster's state over from its old owner")
	}
	if took < up+down {
		t.Errorf("the replicas logged %d warm takeovers, want at least %d", took, up+down)
	}
}
