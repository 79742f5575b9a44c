package e2e

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcluster "sigs.k8s.io/controller-runtime/pkg/cluster"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// checkTypedReads reads the real servers' objects through the cache and client of each
// cluster and compares them with what the apiservers return: Get and List as
// *corev1.ConfigMap and *corev1.Pod, unstructured and metadata-only, in a namespace, by
// labels and by an indexed field, and NotFound as controller-runtime gives it. The
// fleet drops managedFields, so the servers' objects are compared without them. Each of
// mgrs is checked in turn: a controller over a plain fleet and one over a compact fleet.
func checkTypedReads(t *testing.T, env *testenv.Env, clusters []*testenv.Cluster, mgrs ...mcmanager.Manager) {
	ctx := t.Context()
	for _, c := range clusters {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "reader", Labels: map[string]string{"app": "reader"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}
		if _, err := c.Clientset().CoreV1().Pods(demoNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, mgr := range mgrs {
		checkTypedReadsOf(t, clusters, mgr)
	}
}

// checkTypedReadsOf is checkTypedReads of one manager, once the servers have the pods.
func checkTypedReadsOf(t *testing.T, clusters []*testenv.Cluster, mgr mcmanager.Manager) {
	ctx := t.Context()
	for _, c := range clusters {
		cl, err := mgr.GetCluster(ctx, multicluster.ClusterName(c.Name))
		if err != nil {
			t.Fatal(err)
		}
		reader := cl.GetClient()
		cs := c.Clientset()

		eventually(t, convergeTimeout, c.Name+": typed ConfigMaps of the cache equal the server's", func() string {
			server, err := cs.CoreV1().ConfigMaps(demoNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err.Error()
			}
			var got corev1.ConfigMapList
			if err := cl.GetCache().List(ctx, &got, client.InNamespace(demoNamespace)); err != nil {
				return err.Error()
			}
			want := map[string]runtime.Object{}
			for i := range server.Items {
				o := &server.Items[i]
				o.ManagedFields = nil
				o.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
				want[o.Name] = o
			}
			have := map[string]runtime.Object{}
			for i := range got.Items {
				have[got.Items[i].Name] = &got.Items[i]
			}
			if d := diffObjects(want, have); d != "" {
				return d
			}
			// Get of each, from the client, which reads the cache.
			for name, w := range want {
				var one corev1.ConfigMap
				if err := reader.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: name}, &one); err != nil {
					return err.Error()
				}
				if !equality.Semantic.DeepEqual(w, &one) {
					return fmt.Sprintf("Get %s differs from the server's", name)
				}
			}
			return ""
		})

		eventually(t, convergeTimeout, c.Name+": the typed Pod of the cache equals the server's", func() string {
			server, err := cs.CoreV1().Pods(demoNamespace).Get(ctx, "reader", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			server.ManagedFields = nil
			server.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
			var got corev1.Pod
			if err := reader.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: "reader"}, &got); err != nil {
				return err.Error()
			}
			if !equality.Semantic.DeepEqual(server, &got) {
				return "the Pod differs from the server's"
			}
			var pods corev1.PodList
			if err := reader.List(ctx, &pods, client.MatchingLabels{"app": "reader"}); err != nil {
				return err.Error()
			}
			if len(pods.Items) != 1 || !equality.Semantic.DeepEqual(server, &pods.Items[0]) {
				return fmt.Sprintf("List by label gave %d pods, or another one", len(pods.Items))
			}
			return ""
		})

		// Label and field selectors.
		var labelled, byField, none corev1.ConfigMapList
		if err := reader.List(ctx, &labelled, client.InNamespace(demoNamespace), client.MatchingLabels{reconcileLabel: "true"}); err != nil {
			t.Fatal(err)
		}
		serverLabelled, err := cs.CoreV1().ConfigMaps(demoNamespace).List(ctx, metav1.ListOptions{LabelSelector: reconcileLabel + "=true"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names(labelled.Items), names(serverLabelled.Items)) {
			t.Errorf("%s: by label %v, server %v", c.Name, names(labelled.Items), names(serverLabelled.Items))
		}
		if err := reader.List(ctx, &byField, client.MatchingFields{clusterField: c.Name}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names(byField.Items), names(serverLabelled.Items)) {
			t.Errorf("%s: by the indexed field %v, want %v", c.Name, names(byField.Items), names(serverLabelled.Items))
		}
		other := clusters[(slices.Index(clusters, c)+1)%len(clusters)].Name
		if err := reader.List(ctx, &none, client.MatchingFields{clusterField: other}); err != nil || len(none.Items) != 0 {
			t.Errorf("%s: by the field value of %s: %d items, %v; want none of another cluster", c.Name, other, len(none.Items), err)
		}
		if err := reader.List(ctx, &none, client.MatchingFields{"data.unindexed": "x"}); err == nil {
			t.Errorf("%s: a List by a field that is not indexed did not fail", c.Name)
		}

		// Unstructured, through the scheme's kind.
		u := &unstructured.UnstructuredList{}
		u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
		if err := reader.List(ctx, u, client.InNamespace(demoNamespace)); err != nil {
			t.Fatal(err)
		}
		dyn, err := c.Dynamic().Resource(configMapsGVR).Namespace(demoNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want, have := map[string]runtime.Object{}, map[string]runtime.Object{}
		for i := range dyn.Items {
			o := &dyn.Items[i]
			unstructured.RemoveNestedField(o.Object, "metadata", "managedFields")
			want[o.GetName()] = o
		}
		for i := range u.Items {
			have[u.Items[i].GetName()] = &u.Items[i]
		}
		if d := diffObjects(want, have); d != "" {
			t.Errorf("%s: unstructured ConfigMaps: %s", c.Name, d)
		}
		one := &unstructured.Unstructured{}
		one.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		if err := reader.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: "cm-0"}, one); err != nil || !equality.Semantic.DeepEqual(one, want["cm-0"]) {
			t.Errorf("%s: unstructured Get of cm-0: %v, or it differs from the server's", c.Name, err)
		}

		// Metadata only.
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		if err := reader.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: "cm-0"}, meta); err != nil {
			t.Fatal(err)
		}
		if w := want["cm-0"].(*unstructured.Unstructured); meta.UID != w.GetUID() || meta.ResourceVersion != w.GetResourceVersion() || meta.Annotations[reconciledIn] != c.Name {
			t.Errorf("%s: metadata of cm-0: %+v", c.Name, meta.ObjectMeta)
		}

		// NotFound as controller-runtime gives it, and kinds the fleet does not cache.
		err = reader.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: "missing"}, &corev1.ConfigMap{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s: Get of a missing ConfigMap: %v, want NotFound", c.Name, err)
		}
		var notCached *cache.ErrResourceNotCached
		if err := cl.GetCache().Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: "x"}, &corev1.Secret{}); !errors.As(err, &notCached) {
			t.Errorf("%s: Get of a Secret, which the fleet does not cache: %v, want ErrResourceNotCached", c.Name, err)
		}

		checkChangedReads(t, c, cl)
	}
}

// checkChangedReads reads a ConfigMap typed, which the Provider keeps converted
// (mcprovider.Options.TypedObjects), then changes it on the server: updates it, then
// deletes it and creates it again under the same name. As soon as the fleet holds the
// server's new version (an unstructured read, which keeps nothing, shows it), a typed
// Get and List give that version: never the one kept of the object before.
func checkChangedReads(t *testing.T, c *testenv.Cluster, cl crcluster.Cluster) {
	ctx := t.Context()
	cms := c.Clientset().CoreV1().ConfigMaps(demoNamespace)
	key := client.ObjectKey{Namespace: demoNamespace, Name: "changed-reads"}
	// held waits until the fleet holds server, the server's object, and checks that the
	// typed reads give it at once.
	held := func(what string, server *corev1.ConfigMap) {
		t.Helper()
		eventually(t, convergeTimeout, c.Name+": the fleet holds the "+what, func() string {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
			if err := cl.GetCache().Get(ctx, key, u); err != nil {
				return err.Error()
			}
			if u.GetUID() != server.UID || u.GetResourceVersion() != server.ResourceVersion {
				return fmt.Sprintf("uid %s at %s, want %s at %s", u.GetUID(), u.GetResourceVersion(), server.UID, server.ResourceVersion)
			}
			return ""
		})
		want := server.DeepCopy()
		want.ManagedFields = nil
		want.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		for range 2 { // converted, then copied from what the Provider keeps
			var got corev1.ConfigMap
			if err := cl.GetCache().Get(ctx, key, &got); err != nil || !equality.Semantic.DeepEqual(want, &got) {
				t.Fatalf("%s: typed Get of the %s: %v, or it differs from the server's: got data %v at %s, want %v at %s", c.Name, what, err, got.Data, got.ResourceVersion, want.Data, want.ResourceVersion)
			}
			var list corev1.ConfigMapList
			if err := cl.GetCache().List(ctx, &list, client.InNamespace(demoNamespace)); err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(list.Items, func(o corev1.ConfigMap) bool { return o.Name == key.Name })
			if i < 0 || !equality.Semantic.DeepEqual(want, &list.Items[i]) {
				t.Fatalf("%s: typed List lacks the %s, or it differs from the server's", c.Name, what)
			}
		}
	}
	created, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held("created object", created)
	created.Data["v"] = "2"
	updated, err := cms.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held("updated object", updated)
	if err := cms.Delete(ctx, key.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, convergeTimeout, c.Name+": the deletion read typed", func() string {
		if err := cl.GetCache().Get(ctx, key, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("Get: %v, want NotFound", err)
		}
		return ""
	})
	recreated, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: map[string]string{"v": "2"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held("re-created object", recreated)
	if err := cms.Delete(ctx, key.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func names(items []corev1.ConfigMap) []string {
	var out []string
	for _, o := range items {
		out = append(out, o.Name)
	}
	slices.Sort(out)
	return out
}

// diffObjects says how have differs from want, by name; empty if they are equal.
func diffObjects(want, have map[string]runtime.Object) string {
	for name, w := range want {
		h, ok := have[name]
		if !ok {
			return fmt.Sprintf("%s missing", name)
		}
		if !equality.Semantic.DeepEqual(w, h) {
			return fmt.Sprintf("%s differs: server %+v, cache %+v", name, w, h)
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			return fmt.Sprintf("%s is not on the server", name)
		}
	}
	return ""
}
