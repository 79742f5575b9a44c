package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/server"
)

// TestStatefulSetFidelity (issue #34): a StatefulSet with volumeClaimTemplates, created
// as a user would (no apiVersion or kind on the templates; the apiserver fills them), is
// served by the real binary, in its default configuration but for the cache encoding,
// exactly as the apiserver serves it, in a GET and in a list, cold and after a warm
// restart from the snapshot, in every cache encoding. Its protobuf would lose the
// templates' apiVersion and kind; fleetwatch asks for StatefulSets in JSON
// (pbjson.Lossy).
func TestStatefulSetFidelity(t *testing.T) {
	env := testenv.New(t, testenv.Options{Clusters: 1})
	c := env.Clusters[0]
	ctx := t.Context()
	if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db", Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](2),
			ServiceName: "db",
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "db", Image: "registry.example/db:1",
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "logs", MountPath: "/logs"}},
				}}},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{
				{
					ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: map[string]string{"tier": "fast"}},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
					},
				},
				{
					ObjectMeta: metav1.ObjectMeta{Name: "logs"},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("512Mi")}},
					},
				},
			},
		},
	}
	if _, err := c.Clientset().AppsV1().StatefulSets("shop").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	const (
		getPath  = "/apis/apps/v1/namespaces/shop/statefulsets/db"
		listPath = "/apis/apps/v1/statefulsets"
	)
	// truth is the apiserver's JSON of the StatefulSet, from a GET and from a list,
	// without the managedFields that fleetwatch drops by default.
	truth := func() (get, item map[string]any) {
		t.Helper()
		rc := c.Clientset().AppsV1().RESTClient()
		raw, err := rc.Get().AbsPath(getPath).SetHeader("Accept", "application/json").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		get = decodeJSON(t, raw)
		raw, err = rc.Get().AbsPath(listPath).SetHeader("Accept", "application/json").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		item = onlyItem(t, decodeJSON(t, raw))
		for _, o := range []map[string]any{get, item} {
			delete(o["metadata"].(map[string]any), "managedFields")
		}
		// The premise: the apiserver gives every template its apiVersion and kind.
		for _, o := range []map[string]any{get, item} {
			for _, vct := range o["spec"].(map[string]any)["volumeClaimTemplates"].([]any) {
				if v := vct.(map[string]any); v["apiVersion"] != "v1" || v["kind"] != "PersistentVolumeClaim" {
					t.Fatalf("the apiserver serves a volumeClaimTemplate as %v", v)
				}
			}
		}
		return get, item
	}

	bin := buildBinary(t, "./cmd/fleetwatch")
	for _, encoding := range []string{"objects", "compact", "compressed", "compressed-dict"} {
		t.Run(encoding, func(t *testing.T) {
			dir := t.TempDir()
			port := freePort(t)
			base := fmt.Sprintf("http://127.0.0.1:%d/clusters/%s", port, c.Name)
			cfgPath := filepath.Join(dir, "fleetwatch.yaml")
			cfg := fmt.Sprintf(`kubeconfig: [%q]
resources:
  - name: statefulsets.apps
cache:
  encoding: %s
health:
  interval: 1s
  timeout: 1s
snapshot:
  path: %q
  interval: 100ms
server:
  address: 127.0.0.1:%d
`, env.Kubeconfig, encoding, filepath.Join(dir, "fleetwatch.db"), port)
			if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			d := startDaemon(t, bin, cfgPath)
			for _, round := range []string{"cold", "warm"} {
				if round == "warm" {
					if err := d.signal(t, syscall.SIGTERM); err != nil {
						t.Fatalf("fleetwatch exited with %v", err)
					}
					d.start(t)
				}
				waitReadyz(t, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d", port))
				if round == "warm" {
					// The StatefulSet came from the snapshot (the log is written before /readyz passes).
					b, err := os.ReadFile(d.log.Name())
					if err != nil {
						t.Fatal(err)
					}
					if !regexp.MustCompile(`"Snapshot loaded" .*clusters=1 objects=1 `).Match(b) {
						t.Fatalf("the warm start did not load the StatefulSet from the snapshot (log %s)", d.log.Name())
					}
				}
				wantGet, wantItem := truth()
				get := served(t, decodeJSON(t, okBody(t, base+getPath)))
				if diff := jsonDiff("", get, wantGet); len(diff) > 0 {
					t.Errorf("%s: GET differs from the apiserver's at %s", round, strings.Join(diff, ", "))
				}
				item := served(t, onlyItem(t, decodeJSON(t, okBody(t, base+listPath))))
				// A list's items carry no kind or apiVersion from the apiserver; fleetwatch
				// serves each item with its own.
				wantItem["kind"], wantItem["apiVersion"] = "StatefulSet", "apps/v1"
				if diff := jsonDiff("", item, wantItem); len(diff) > 0 {
					t.Errorf("%s: the list's item differs from the apiserver's at %s", round, strings.Join(diff, ", "))
				}
			}
		})
	}
}

// served returns o, an object that fleetwatch served, without what fleetwatch adds:
// the cluster annotation, and the object's own resourceVersion in place of the cursor.
func served(t *testing.T, o map[string]any) map[string]any {
	t.Helper()
	md, _ := o["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	if ann[server.ClusterAnnotation] == nil {
		t.Fatalf("served without the annotation %s: %v", server.ClusterAnnotation, md)
	}
	delete(ann, server.ClusterAnnotation)
	if rv, ok := ann[server.ResourceVersionAnnotation]; ok {
		md["resourceVersion"] = rv
		delete(ann, server.ResourceVersionAnnotation)
	}
	if len(ann) == 0 {
		delete(md, "annotations")
	}
	return o
}

// okBody returns the body of a GET of url, which must answer 200.
func okBody(t *testing.T, url string) []byte {
	t.Helper()
	code, body := httpGet(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	return body
}

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return m
}

// onlyItem returns the one item of list.
func onlyItem(t *testing.T, list map[string]any) map[string]any {
	t.Helper()
	items, _ := list["items"].([]any)
	if len(items) != 1 {
		t.Fatalf("%d items, want 1: %v", len(items), list)
	}
	return items[0].(map[string]any)
}

// jsonDiff returns the paths at which got and want differ.
func jsonDiff(path string, got, want any) []string {
	gm, gok := got.(map[string]any)
	wm, wok := want.(map[string]any)
	if gok && wok {
		var out []string
		for k := range wm {
			out = append(out, jsonDiff(path+"."+k, gm[k], wm[k])...)
		}
		for k := range gm {
			if _, ok := wm[k]; !ok {
				out = append(out, path+"."+k+" (not the apiserver's)")
			}
		}
		slices.Sort(out)
		return out
	}
	ga, gok := got.([]any)
	wa, wok := want.([]any)
	if gok && wok && len(ga) == len(wa) {
		var out []string
		for i := range wa {
			out = append(out, jsonDiff(fmt.Sprintf("%s[%d]", path, i), ga[i], wa[i])...)
		}
		return out
	}
	if !reflect.DeepEqual(got, want) {
		return []string{fmt.Sprintf("%s (%v, want %v)", path, got, want)}
	}
	return nil
}
