package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/search"
	"github.com/fleetwatch/fleetwatch/server"
	"github.com/fleetwatch/fleetwatch/shard"
)

// TestFanOut runs three replicas of the real binary over four member apiservers, with
// a token file, and asks each replica for the whole fleet: the same kubectl list of
// every cluster, whole and in pages across the replicas, equals the servers' truth
// through every replica; a token limited to two clusters gets those only, through
// every replica; a search of every cluster, in pages, through each replica finds the
// servers' configmaps of every cluster (or the token's) with their totals and counts,
// though each replica owns only some of them; a watch of a cluster through a replica
// that does not own it streams its changes and resumes from its resourceVersion; a
// watch of every cluster resumes from its merged resourceVersion through any replica;
// after kill -9 of a replica, the others keep answering, and name the clusters they
// cannot include.
func TestFanOut(t *testing.T) {
	t.Parallel()
	f := newShardedFleet(t, 4)
	const admin, limited = "admin-token-0123456789", "limited-token-0123456789"
	f.secure(admin+" user=admin\n"+limited+" user=limited clusters=member-1,member-3\n", admin)
	ctx := t.Context()
	// Enough objects per member that small pages end inside every replica's part.
	for _, m := range f.members {
		for i := range 4 {
			createConfigMap(t, m.Clientset(), "shop", fmt.Sprintf("page-%d", i), m.Name)
		}
	}
	churn := startChurn(t, f.members)
	begin := time.Now()
	ids := []string{"fleetwatch-0", "fleetwatch-1", "fleetwatch-2"}
	for _, id := range ids {
		f.start(id)
	}
	t.Logf("3 replicas settled in %v", f.waitSettled(churn, ids...))
	names := make([]string, len(f.members))
	for i, m := range f.members {
		names[i] = m.Name
	}
	assigned := shard.Assign(names, ids)

	// kubectlAt lists the configmaps of every cluster through the replica id as JSON,
	// in pages of chunk (0: whole), and returns their keys with resourceVersions.
	kubectlAt := func(id, token string, chunk int) []string {
		t.Helper()
		out := kubectl(t, "--server", f.replicas[id].base+"/clusters/*", "--token", token, "--certificate-authority", f.certFile,
			"get", "configmaps", "-A", "-o", "json", fmt.Sprintf("--chunk-size=%d", chunk))
		return configMapKeys(t, out)
	}

	t.Run("every replica lists the whole fleet", func(t *testing.T) {
		churn.pause()
		defer churn.resume()
		want := configMapTruth(ctx, t, f.members)
		for _, id := range ids {
			for _, chunk := range []int{0, 3} {
				if got := kubectlAt(id, admin, chunk); !slices.Equal(got, want) {
					t.Errorf("kubectl get configmaps -A --chunk-size=%d through %s: %d objects, want the servers' %d:\n%s", chunk, id, len(got), len(want), keyDiff(got, want))
				}
			}
			// The Table that kubectl prints: a row per object, in the same order.
			out := kubectl(t, "--server", f.replicas[id].base+"/clusters/*", "--token", admin, "--certificate-authority", f.certFile, "get", "configmaps", "-A", "--no-headers", "--chunk-size=5")
			if rows := strings.Count(out, "\n"); rows != len(want) {
				t.Errorf("kubectl get configmaps -A through %s prints %d rows, want %d:\n%s", id, rows, len(want), out)
			}
		}
	})

	t.Run("continue tokens are checked", func(t *testing.T) {
		base := f.replicas[ids[0]].base + "/clusters/*/api/v1/configmaps"
		code, body := fetchAs(ctx, f.client, base+"?limit=2", admin)
		var page unstructured.UnstructuredList
		if code != http.StatusOK || json.Unmarshal(body, &page) != nil || page.GetContinue() == "" {
			t.Fatalf("first page: %d %.300s", code, body)
		}
		raw, err := base64.RawURLEncoding.DecodeString(page.GetContinue())
		if err != nil {
			t.Fatal(err)
		}
		var tok map[string]any
		if err := json.Unmarshal(raw, &tok); err != nil {
			t.Fatal(err)
		}
		for name, tampered := range map[string]string{
			"not base64":    page.GetContinue() + "!",
			"cut short":     page.GetContinue()[:len(page.GetContinue())/2],
			"unknown field": reencode(t, tok, "x", "1"),
			"no key":        reencode(t, tok, "k", ""),
			"bad version":   reencode(t, tok, "rv", "e30"),
		} {
			code, body := fetchAs(ctx, f.client, base+"?limit=2&continue="+url.QueryEscape(tampered), admin)
			if code != http.StatusBadRequest && code != http.StatusGone {
				t.Errorf("a continue token %s: %d %.200s, want 400 or 410", name, code, body)
			}
		}
	})

	t.Run("a token limited to some clusters", func(t *testing.T) {
		churn.pause()
		defer churn.resume()
		mine := []*testenv.Cluster{f.members[0], f.members[2]}
		want := configMapTruth(ctx, t, mine)
		for _, id := range ids {
			if got := kubectlAt(id, limited, 3); !slices.Equal(got, want) {
				t.Errorf("the limited token through %s gets %d objects, want those of member-1 and member-3, %d:\n%s", id, len(got), len(want), keyDiff(got, want))
			}
			for _, m := range []string{"member-2", "member-4"} {
				code, body := fetchAs(ctx, f.client, f.replicas[id].base+"/clusters/"+m+"/api/v1/configmaps", limited)
				if code != http.StatusForbidden && code != http.StatusNotFound {
					t.Errorf("the limited token gets %d from %s for %s (owned by %s): %.200s", code, id, m, assigned[m], body)
				}
			}
			// Another replica's header does not make a replica skip its checks.
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.replicas[id].base+"/clusters/member-2/api/v1/configmaps", nil)
			req.Header.Set("Authorization", "Bearer "+limited)
			req.Header.Set("X-Fleetwatch-Forwarded", "1")
			res, err := f.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusForbidden && res.StatusCode != http.StatusNotFound {
				t.Errorf("the limited token with the forwarded header gets %d from %s for member-2", res.StatusCode, id)
			}
		}
	})

	t.Run("a search through a replica that owns part of the fleet", func(t *testing.T) {
		churn.pause()
		defer churn.resume()
		truth := map[string][]string{admin: configMapTruth(ctx, t, f.members), limited: configMapTruth(ctx, t, []*testenv.Cluster{f.members[0], f.members[2]})}
		for _, id := range ids {
			var owns []string
			for _, m := range names {
				if assigned[m] == id {
					owns = append(owns, m)
				}
			}
			for _, token := range []string{admin, limited} {
				want := truth[token]
				eventually(t, 30*time.Second, fmt.Sprintf("a search through %s (owner of %v) equals the servers' truth", id, owns), func() string {
					keys, res, warn, err := searchAll(ctx, f.client, f.replicas[id].base, token, "q="+url.QueryEscape("kind:ConfigMap"))
					if err != nil {
						t.Fatalf("a search through %s: %v", id, err)
					}
					counts := map[string]int{}
					for _, k := range want {
						cl, _, _ := strings.Cut(k, "/")
						counts[cl]++
					}
					if !slices.Equal(keys, want) || res.Total != len(want) || !maps.Equal(res.Counts.Clusters, counts) || warn != "" {
						return fmt.Sprintf("%d items, total %d, counts %v, want %d, %v; Warning %q:\n%s", len(keys), res.Total, res.Counts.Clusters, len(want), counts, warn, keyDiff(keys, want))
					}
					return ""
				})
			}
		}
	})

	t.Run("a watch through a replica that does not own the cluster", func(t *testing.T) {
		m := f.members[1]
		var via string
		for _, id := range ids {
			if id != assigned[m.Name] {
				via = id
				break
			}
		}
		path := f.replicas[via].base + "/clusters/" + m.Name + "/api/v1/namespaces/shop/configmaps"
		code, body := fetchAs(ctx, f.client, path, admin)
		var list unstructured.UnstructuredList
		if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
			t.Fatalf("list through %s: %d %.300s", via, code, body)
		}
		// watchUntil streams the watch from rv and returns the resourceVersion of the
		// event that adds name.
		watchUntil := func(rv, name string) string {
			t.Helper()
			found := ""
			ok, err := watchEvents(ctx, t, f.client, path+"?watch=true&resourceVersion="+url.QueryEscape(rv), admin, nil, func(typ string, o *unstructured.Unstructured) bool {
				if typ == "ADDED" && o.GetName() == name {
					found = o.GetResourceVersion()
					return true
				}
				return false
			})
			if !ok {
				t.Fatalf("the watch through %s from %s ended without %s: %v", via, rv, name, err)
			}
			return found
		}
		done := make(chan string, 1)
		go func() { done <- watchUntil(list.GetResourceVersion(), "watched-1") }()
		time.Sleep(200 * time.Millisecond) // the watch is open or about to be: it resumes from the list either way
		createConfigMap(t, m.Clientset(), "shop", "watched-1", m.Name)
		rv := <-done
		// Disconnected: a change meanwhile is sent when the watch resumes from rv.
		createConfigMap(t, m.Clientset(), "shop", "watched-2", m.Name)
		watchUntil(rv, "watched-2")
	})

	t.Run("a watch of every cluster through one replica", func(t *testing.T) {
		const path = "/clusters/*/api/v1/namespaces/shop/configmaps"
		code, body := fetchAs(ctx, f.client, f.replicas[ids[0]].base+path, admin)
		var list unstructured.UnstructuredList
		if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
			t.Fatalf("list: %d %.300s", code, body)
		}
		// watchFor streams the watch through replica via from rv until it has seen name
		// ADDED in every member, and returns the resourceVersion of the last event.
		watchFor := func(via, rv, name string, create func()) string {
			t.Helper()
			seen := map[string]bool{}
			last := ""
			ok, err := watchEvents(ctx, t, f.client, f.replicas[via].base+path+"?watch=true&resourceVersion="+url.QueryEscape(rv), admin, create, func(typ string, o *unstructured.Unstructured) bool {
				last = o.GetResourceVersion()
				if strings.HasPrefix(o.GetName(), "fan-") && o.GetName() != name && typ == "ADDED" {
					t.Errorf("the watch from %s sent %s of %s again", rv, o.GetName(), o.GetAnnotations()["fleetwatch.io/cluster"])
				}
				if typ == "ADDED" && o.GetName() == name {
					seen[o.GetAnnotations()["fleetwatch.io/cluster"]] = true
				}
				return len(seen) == len(f.members)
			})
			if !ok {
				t.Fatalf("the watch through %s from %s ended with %s in %v only: %v", via, rv, name, seen, err)
			}
			return last
		}
		last := watchFor(ids[0], list.GetResourceVersion(), "fan-1", func() {
			for _, m := range f.members {
				createConfigMap(t, m.Clientset(), "shop", "fan-1", m.Name)
			}
		})
		// Disconnected: what changed meanwhile in every member comes when it resumes,
		// through any replica (a client behind the Service lands on another one).
		for i, name := range []string{"fan-2", "fan-3", "fan-4"} {
			for _, m := range f.members {
				createConfigMap(t, m.Clientset(), "shop", name, m.Name)
			}
			last = watchFor(ids[(i+1)%len(ids)], last, name, nil)
		}
	})

	t.Run("a replica that watches no cluster", func(t *testing.T) {
		// An identity that rendezvous hashing assigns no member to: it joins and leaves
		// without moving any, and serves every cluster by asking their owners.
		idle := ""
		for i := len(ids); idle == "" && i < 100; i++ {
			id := fmt.Sprintf("fleetwatch-%d", i)
			if !slices.Contains(slices.Collect(maps.Values(shard.Assign(names, append(slices.Clone(ids), id)))), id) {
				idle = id
			}
		}
		f.start(idle)
		defer f.stopReplica(idle)
		t.Logf("%s settled in %v", idle, f.waitSettled(churn, append(slices.Clone(ids), idle)...))
		kubectlIdle := func(args ...string) string {
			return kubectl(t, append([]string{"--server", f.replicas[idle].base + "/clusters/*", "--token", admin, "--certificate-authority", f.certFile}, args...)...)
		}
		if out := kubectlIdle("api-resources", "--no-headers"); !strings.Contains(out, "configmaps") {
			t.Errorf("kubectl api-resources through %s:\n%s", idle, out)
		}
		if out := kubectlIdle("get", "clusters.fleetwatch.io", "--no-headers"); strings.Count(out, "\n") != len(f.members) || strings.Count(out, "Synced") != len(f.members) {
			t.Errorf("kubectl get clusters.fleetwatch.io through %s:\n%s", idle, out)
		}
		func() {
			churn.pause()
			defer churn.resume()
			want := configMapTruth(ctx, t, f.members)
			for _, chunk := range []int{0, 3} {
				if got := kubectlAt(idle, admin, chunk); !slices.Equal(got, want) {
					t.Errorf("kubectl get configmaps -A --chunk-size=%d through %s: %d objects, want the servers' %d:\n%s", chunk, idle, len(got), len(want), keyDiff(got, want))
				}
			}
			if rows := strings.Count(kubectlIdle("get", "configmaps", "-A", "--no-headers"), "\n"); rows != len(want) {
				t.Errorf("kubectl get configmaps -A through %s prints %d rows, want %d", idle, rows, len(want))
			}
			if got := kubectlAt(idle, limited, 0); !slices.Equal(got, configMapTruth(ctx, t, []*testenv.Cluster{f.members[0], f.members[2]})) {
				t.Errorf("the limited token through %s gets %d objects", idle, len(got))
			}
		}()
		// A watch of every cluster through it streams a change made on a member.
		m := f.members[len(f.members)-1]
		ok, err := watchEvents(ctx, t, f.client, f.replicas[idle].base+"/clusters/*/api/v1/namespaces/shop/configmaps?watch=true", admin, func() {
			createConfigMap(t, m.Clientset(), "shop", "idle-1", m.Name)
		}, func(typ string, o *unstructured.Unstructured) bool {
			return typ == "ADDED" && o.GetName() == "idle-1" && o.GetAnnotations()["fleetwatch.io/cluster"] == m.Name
		})
		if !ok {
			t.Errorf("the watch through %s ended without idle-1 of %s: %v", idle, m.Name, err)
		}
	})

	t.Run("kill -9 of a replica", func(t *testing.T) {
		churn.pause()
		defer churn.resume()
		victim := ids[2]
		var theirs, others []*testenv.Cluster
		for _, m := range f.members {
			if assigned[m.Name] == victim {
				theirs = append(theirs, m)
			} else {
				others = append(others, m)
			}
		}
		if len(theirs) == 0 {
			t.Fatalf("%s owns no cluster of %v", victim, assigned)
		}
		killed := time.Now()
		_ = f.replicas[victim].signal(t, syscall.SIGKILL)
		wantOthers := configMapTruth(ctx, t, others)
		wantAll := configMapTruth(ctx, t, f.members)
		// Until the others take its clusters, a list of every cluster is answered
		// without them, and a Warning names them; then it is whole again.
		marked := false
		eventually(t, shardLease+40*time.Second, "the fleet whole again after kill -9", func() string {
			for _, id := range ids[:2] {
				keys, warn, err := listAll(ctx, f.client, f.replicas[id].base, admin)
				if err != nil {
					t.Fatalf("%s %v after kill -9: %v", id, time.Since(killed), err)
				}
				switch {
				case slices.Equal(keys, wantAll) && warn == "":
				case slices.Equal(keys, wantOthers) && warn != "":
					for _, m := range theirs {
						if !strings.Contains(warn, m.Name) {
							t.Errorf("%s leaves out %s and its Warning does not name it: %s", id, m.Name, warn)
						}
					}
					marked = true
					return fmt.Sprintf("%s: %s", id, warn)
				default:
					return fmt.Sprintf("%s %v after kill -9: %d objects, Warning %q:\n%s", id, time.Since(killed), len(keys), warn, keyDiff(keys, wantAll))
				}
				// A cluster of the killed replica is never answered empty.
				for _, m := range theirs {
					code, body := fetchAs(ctx, f.client, f.replicas[id].base+"/clusters/"+m.Name+"/api/v1/configmaps", admin)
					if code != http.StatusOK && code != http.StatusServiceUnavailable {
						t.Errorf("%s answers %d for %s after kill -9: %.200s", id, code, m.Name, body)
					}
				}
			}
			return ""
		})
		if !marked {
			t.Errorf("no list after kill -9 was marked as leaving out the clusters of %s", victim)
		}
		t.Logf("the fleet was whole through the other replicas %v after kill -9", time.Since(killed))
	})
	t.Logf("the whole test took %v", time.Since(begin))
}

// listAll lists the configmaps of every cluster through the replica at base, in pages of
// 4, and returns the keys and the Warnings of the pages.
func listAll(ctx context.Context, client *http.Client, base, token string) (keys []string, warnings string, err error) {
	cont := ""
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/clusters/*/api/v1/configmaps?limit=4&continue="+url.QueryEscape(cont), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := client.Do(req)
		if err != nil {
			return nil, "", err
		}
		var list unstructured.UnstructuredList
		err = json.NewDecoder(res.Body).Decode(&list)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || err != nil {
			return nil, "", fmt.Errorf("%s: %v", res.Status, err)
		}
		warnings += strings.Join(res.Header.Values("Warning"), "\n")
		for _, o := range list.Items {
			keys = append(keys, aggregate.KeyFor(o.GetAnnotations()["fleetwatch.io/cluster"], &o).String()+"@"+o.GetResourceVersion())
		}
		if cont = list.GetContinue(); cont == "" {
			sort.Strings(keys)
			return keys, warnings, nil
		}
	}
}

// searchAll searches every cluster through the replica at base as the token, in pages
// of 5, and returns the keys of the items found (as configMapKeys), the first page, and
// the Warnings; the items must come in the search's order.
func searchAll(ctx context.Context, client *http.Client, base, token, query string) (keys []string, first server.SearchResult, warnings string, err error) {
	cont := ""
	var last *search.Key
	for page := 0; ; page++ {
		u := base + "/apis/fleetwatch.io/v1alpha1/search?limit=5&" + query
		if cont != "" {
			u += "&continue=" + url.QueryEscape(cont)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := client.Do(req)
		if err != nil {
			return nil, first, "", err
		}
		var sr server.SearchResult
		err = json.NewDecoder(res.Body).Decode(&sr)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || err != nil {
			return nil, first, "", fmt.Errorf("%s: %v", res.Status, err)
		}
		if page == 0 {
			first = sr
		}
		warnings += strings.Join(res.Header.Values("Warning"), "\n")
		for _, it := range sr.Items {
			k := search.Key{Cluster: it.Cluster, Kind: it.Kind, Group: it.Group, Version: it.Version, Resource: it.Resource, Namespace: it.Namespace, Name: it.Name}
			if last != nil && k.Compare(*last) <= 0 {
				return nil, first, "", fmt.Errorf("page %d: %+v after %+v", page, k, *last)
			}
			last = &k
			keys = append(keys, aggregate.Key{Cluster: it.Cluster, Namespace: it.Namespace, Name: it.Name}.String()+"@"+it.ResourceVersion)
		}
		if cont = sr.Metadata.Continue; cont == "" {
			sort.Strings(keys)
			return keys, first, warnings, nil
		}
	}
}

// configMapKeys returns cluster/namespace/name@resourceVersion of a kubectl -o json
// list, sorted.
func configMapKeys(t *testing.T, out string) []string {
	t.Helper()
	var list unstructured.UnstructuredList
	if err := list.UnmarshalJSON([]byte(out)); err != nil {
		t.Fatalf("not a list: %v\n%.500s", err, out)
	}
	keys := []string{}
	for _, item := range list.Items {
		keys = append(keys, aggregate.KeyFor(item.GetAnnotations()["fleetwatch.io/cluster"], &item).String()+"@"+item.GetResourceVersion())
	}
	sort.Strings(keys)
	return keys
}

// configMapTruth returns the keys of the configmaps of the clusters, as their
// apiservers hold them.
func configMapTruth(ctx context.Context, t *testing.T, clusters []*testenv.Cluster) []string {
	t.Helper()
	keys := []string{}
	for _, c := range clusters {
		list, err := c.Dynamic().Resource(configMapsGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range list.Items {
			keys = append(keys, aggregate.KeyFor(c.Name, &item).String()+"@"+item.GetResourceVersion())
		}
	}
	sort.Strings(keys)
	return keys
}

// keyDiff says which keys are in one list only.
func keyDiff(got, want []string) string {
	var b strings.Builder
	for _, k := range got {
		if !slices.Contains(want, k) {
			fmt.Fprintf(&b, "+ %s\n", k)
		}
	}
	for _, k := range want {
		if !slices.Contains(got, k) {
			fmt.Fprintf(&b, "- %s\n", k)
		}
	}
	return b.String()
}

// reencode returns the token tok with field set to v ("" deletes it), encoded.
func reencode(t *testing.T, tok map[string]any, field, v string) string {
	t.Helper()
	c := map[string]any{}
	for k, x := range tok {
		c[k] = x
	}
	if v == "" {
		delete(c, field)
	} else {
		c[field] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// watchEvents watches target with the bearer token for at most 30s, failing the test unless
// the watch is answered 200, then calls opened, if not nil, and each with every event
// until each returns true. It reports whether each did before the watch ended, and why
// the watch ended otherwise.
func watchEvents(ctx context.Context, t *testing.T, client *http.Client, target, token string, opened func(), each func(typ string, o *unstructured.Unstructured) bool) (bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("watch %s: %s", target, res.Status)
	}
	if opened != nil {
		opened()
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e metav1.WatchEvent
		var o unstructured.Unstructured
		if json.Unmarshal(sc.Bytes(), &e) != nil || o.UnmarshalJSON(e.Object.Raw) != nil {
			t.Fatalf("not a watch event: %.300s", sc.Bytes())
		}
		if each(e.Type, &o) {
			return true, nil
		}
	}
	return false, sc.Err()
}
