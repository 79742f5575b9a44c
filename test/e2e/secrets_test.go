package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// secretValues are the values of the Secrets of a test, each a random string that
// appears nowhere else, by the name of the Secret it was first given to.
type secretValues map[string]string

func newSecretValue(t *testing.T) string {
	t.Helper()
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// leak returns where data holds one of the values, in one of the forms a value can take:
// plain, or base64 in the standard or URL alphabet, padded or not. "" if it holds none.
func (v secretValues) leak(data []byte) string {
	for name, value := range v {
		forms := map[string]string{
			"plain":          value,
			"base64":         base64.StdEncoding.EncodeToString([]byte(value)),
			"raw base64":     base64.RawStdEncoding.EncodeToString([]byte(value)),
			"base64url":      base64.URLEncoding.EncodeToString([]byte(value)),
			"raw base64url":  base64.RawURLEncoding.EncodeToString([]byte(value)),
			"JSON-in-string": strings.ReplaceAll(value, `"`, `\"`),
		}
		for form, s := range forms {
			if i := bytes.Index(data, []byte(s)); i >= 0 {
				return fmt.Sprintf("the value of Secret %s (%s) at byte %d: ...%q...", name, form, i, data[max(0, i-120):min(len(data), i+len(s)+40)])
			}
		}
	}
	return ""
}

// noLeak fails the test if data holds a value.
func (v secretValues) noLeak(t *testing.T, what string, data []byte) {
	t.Helper()
	if where := v.leak(data); where != "" {
		t.Errorf("%s holds %s", what, where)
	}
}

// logText returns log followed by the bytes of every hex dump in it: client-go logs a
// body that is not text, such as protobuf, as hex.Dump, in which a search of the log
// would not find a value.
func logText(log string) []byte {
	out := []byte(log)
	for line := range strings.Lines(log) {
		// "00000010  6b 38 73 00 0a 0c 0a 02  76 31 12 06 53 65 63 72  |k8s.....v1..Secr|"
		line = strings.TrimLeft(line, " \t")
		offset, rest, ok := strings.Cut(line, "  ")
		if !ok || len(offset) != 8 || strings.Trim(offset, "0123456789abcdef") != "" {
			continue
		}
		rest, _, found := strings.Cut(rest, "|")
		if !found {
			continue
		}
		if offset == "00000000" {
			out = append(out, '\n')
		}
		for _, f := range strings.Fields(rest) {
			b, err := hex.DecodeString(f)
			if err != nil || len(b) != 1 {
				break
			}
			out = append(out, b[0])
		}
	}
	return out
}

// secretManifest returns a Secret manifest in namespace vault with the value under
// password, in stringData or, base64-encoded, in data.
func secretManifest(name, value string, inData bool) string {
	if inData {
		return fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: vault, labels: {app: vault}}\ndata: {password: %s}\n",
			name, base64.StdEncoding.EncodeToString([]byte(value)))
	}
	return fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: vault, labels: {app: vault}}\nstringData: {password: %s}\n", name, value)
}

// runSecretsDaemon runs `bin serve --config config`, with its stdout and stderr in the test's
// log file named logName, until stop, with the environment variables env added. Its
// verbosity is the config's.
func runSecretsDaemon(t *testing.T, bin, config, logName string, env ...string) *daemon {
	t.Helper()
	d := &daemon{bin: bin, config: config, log: logFile(t, logName)}
	d.cmd = exec.Command(bin, "serve", "--config", config)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.done = make(chan error, 1)
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.signal(t, syscall.SIGKILL)
		}
	})
	return d
}

// stopGracefully stops the daemon with SIGTERM, as a graceful shutdown, which commits the
// snapshot.
func (d *daemon) stopGracefully(t *testing.T) {
	t.Helper()
	if err := d.signal(t, syscall.SIGTERM); err != nil {
		t.Fatalf("fleetwatch exited with %v after SIGTERM; log: %s", err, d.log.Name())
	}
}

// getAccepting returns the body of a GET of url with the Accept header accept (none if empty),
// failing the test unless it answers 200.
func getAccepting(t *testing.T, url, accept string) []byte {
	t.Helper()
	r := get(t.Context(), t, http.DefaultClient, url, accept)
	if r.code != http.StatusOK {
		t.Fatalf("GET %s (Accept %q): %d %s", url, accept, r.code, r.body)
	}
	return r.body
}

const (
	secretsAcceptTable       = "application/json;as=Table;v=v1;g=meta.k8s.io"
	secretsAcceptPartial     = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
	secretsAcceptPartialList = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
	secretsVaultPath         = "/api/v1/namespaces/vault/secrets"
	secretsLogVerbosity      = 8
)

// readSecretsInAllForms reads the Secrets named names from the daemon at base in every form the
// API serves them (get, list, fleet list, Table with and without the objects,
// PartialObjectMetadata, kubectl's own requests), and /metrics, and returns the bodies.
// Each body must name the Secrets it is about.
func readSecretsInAllForms(t *testing.T, base string, names []string) map[string][]byte {
	t.Helper()
	bodies := map[string][]byte{}
	lists := []string{
		base + "/clusters/prod" + secretsVaultPath,
		base + "/clusters/prod/api/v1/secrets",
		base + "/clusters/*/api/v1/secrets",
		base + "/clusters/*" + secretsVaultPath + "?labelSelector=app%3Dvault",
	}
	for _, url := range lists {
		for _, form := range []struct{ query, accept string }{
			{"", ""},
			{"", secretsAcceptPartialList},
			{"includeObject=Object", secretsAcceptTable},
			{"includeObject=Metadata", secretsAcceptTable},
			{"", secretsAcceptTable},
		} {
			u := url
			if form.query != "" {
				u += map[bool]string{true: "&", false: "?"}[strings.Contains(u, "?")] + form.query
			}
			body := getAccepting(t, u, form.accept)
			for _, name := range names {
				if !bytes.Contains(body, []byte(`"`+name+`"`)) {
					t.Errorf("GET %s (Accept %q) does not name Secret %s:\n%.2000s", u, form.accept, name, body)
				}
			}
			bodies[u+" "+form.accept] = body
		}
	}
	for _, name := range names {
		url := base + "/clusters/prod" + secretsVaultPath + "/" + name
		for _, form := range []struct{ query, accept string }{
			{"", ""},
			{"", secretsAcceptPartial},
			{"?includeObject=Object", secretsAcceptTable},
		} {
			bodies[url+form.query+" "+form.accept] = getAccepting(t, url+form.query, form.accept)
		}
	}
	all := base + "/clusters/*"
	bodies["kubectl -o yaml"] = []byte(kubectl(t, "--server", all, "get", "secrets", "-A", "-o", "yaml"))
	bodies["kubectl -o wide"] = []byte(kubectl(t, "--server", all, "get", "secrets", "-A", "-o", "wide"))
	bodies["kubectl get -o json"] = []byte(kubectl(t, "--server", base+"/clusters/prod", "get", "secret", names[0], "-n", "vault", "-o", "json"))
	bodies["/metrics"] = getAccepting(t, base+"/metrics", "")
	return bodies
}

// secretsWatch is a watch of Secrets whose stream is collected until the test ends.
type secretsWatch struct {
	// mu guards body.
	mu   sync.Mutex
	body []byte
}

// startSecretsWatch watches url with the Accept header accept.
func startSecretsWatch(t *testing.T, url, accept string) *secretsWatch {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("watch %s: %d %s", url, resp.StatusCode, b)
	}
	w := &secretsWatch{}
	go func() {
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			w.mu.Lock()
			w.body = append(w.body, buf[:n]...)
			w.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return w
}

func (w *secretsWatch) read() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.body)
}

// TestDaemonKeepsNoSecretValue makes Secrets on a real cluster in every way kubectl makes
// them, runs the fleetwatch binary with secrets configured and the default
// cache.keepSecretData, and reads them back in every form: no response, log line (at
// verbosity 8, where client-go logs response bodies), metric or byte of the snapshot
// holds a value. Then it upgrades a snapshot that holds values, as the versions before
// schema 3 wrote them: the migration scrubs it and the warm restart converges.
func TestDaemonKeepsNoSecretValue(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Names: []string{"prod"}})
	ctx := t.Context()
	c := env.Clusters[0]
	kc := func(args ...string) string {
		t.Helper()
		return kubectl(t, append([]string{"--kubeconfig", env.Kubeconfig, "--context", "prod"}, args...)...)
	}
	apply := func(manifest string, args ...string) {
		t.Helper()
		kubectlIn(t, strings.NewReader(manifest), append([]string{"--kubeconfig", env.Kubeconfig, "--context", "prod", "apply", "-f", "-"}, args...)...)
	}
	values := secretValues{}
	value := func(name string) string {
		v := newSecretValue(t)
		values[name] = v
		return v
	}

	kc("create", "namespace", "vault")
	kc("create", "serviceaccount", "robot", "-n", "vault")
	apply(secretManifest("applied-stringdata", value("applied-stringdata"), false))
	apply(secretManifest("applied-data", value("applied-data"), true))
	apply(secretManifest("server-side", value("server-side"), false), "--server-side", "--field-manager", "e2e")
	kc("create", "secret", "generic", "created", "-n", "vault", "--from-literal=password="+value("created"))
	kc("create", "secret", "generic", "created-saved", "-n", "vault", "--save-config", "--from-literal=password="+value("created-saved"))
	// A large Secret, whose value ends a run of pages of the snapshot: when it is
	// dropped, the small objects written after it leave the end of the run free, with
	// the value, unless the file is compacted.
	padding := filepath.Join(t.TempDir(), "padding")
	if err := os.WriteFile(padding, bytes.Repeat([]byte("0123456789abcdef"), 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	kc("create", "secret", "generic", "bulky", "-n", "vault", "--from-file=padding="+padding, "--from-literal=password="+value("bulky"))
	kc("label", "secret", "created", "created-saved", "bulky", "-n", "vault", "app=vault")
	// The token controller does not run beside a bare apiserver: the token is ours.
	apply(fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: robot-token\n  namespace: vault\n  labels: {app: vault}\n"+
		"  annotations: {kubernetes.io/service-account.name: robot}\ntype: kubernetes.io/service-account-token\ndata: {token: %s}\n",
		base64.StdEncoding.EncodeToString([]byte(value("robot-token")))))
	names := []string{"applied-data", "applied-stringdata", "bulky", "created", "created-saved", "robot-token", "server-side"}
	// The API server holds the values, where the test can find them.
	for _, name := range names {
		s, err := c.Clientset().CoreV1().Secrets("vault").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := s.Marshal()
		if values.leak(raw) == "" {
			t.Fatalf("Secret %s holds no value to look for", name)
		}
	}

	bin := buildBinary(t, "./cmd/fleetwatch")
	dir := t.TempDir()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	snapshot := filepath.Join(dir, "fleetwatch.db")
	writeConfig := func(snapshot, resources, cache string) string {
		t.Helper()
		path := filepath.Join(dir, "fleetwatch.yaml")
		cfg := fmt.Sprintf("kubeconfig: [%q]\nresources:\n%s  - name: namespaces\n%s\nsnapshot:\n  path: %q\n  interval: 100ms\nserver:\n  address: 127.0.0.1:%d\nlog:\n  verbosity: %d\n",
			env.Kubeconfig, resources, cache, snapshot, port, secretsLogVerbosity)
		// As an editor writes it, for the running daemon to reload.
		if err := os.WriteFile(path+".tmp", []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// served returns the names of the Secrets that the daemon serves, at their
	// resourceVersions.
	served := func() []string {
		var out []string
		for _, item := range listItems(t, base+"/clusters/prod"+secretsVaultPath) {
			rv := item.GetAnnotations()["fleetwatch.io/resource-version"]
			if rv == "" {
				rv = item.GetResourceVersion()
			}
			out = append(out, item.GetName()+"@"+rv)
		}
		slices.Sort(out)
		return out
	}
	truth := func() []string {
		list, err := c.Clientset().CoreV1().Secrets("vault").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list.Items {
			out = append(out, s.Name+"@"+s.ResourceVersion)
		}
		slices.Sort(out)
		return out
	}
	converges := func(what string) {
		t.Helper()
		eventually(t, 60*time.Second, what, func() string {
			if got, want := served(), truth(); !slices.Equal(got, want) {
				return fmt.Sprintf("served %v\nserver %v", got, want)
			}
			return ""
		})
	}
	checkFile := func(t *testing.T, what, path string) {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		values.noLeak(t, what, data)
	}
	// checkObjects searches the objects of the snapshot at path, which no daemon has open,
	// as they decode: a compressed encoding (cache.encoding compressed) would hide a value
	// from a search of the file's bytes.
	checkObjects := func(t *testing.T, what, path string) {
		t.Helper()
		for name, cs := range loadSnapshot(t, path).Clusters {
			for key, rs := range cs.Resources {
				for _, obj := range rs.Objects {
					js, err := json.Marshal(obj)
					if err != nil {
						t.Fatal(err)
					}
					values.noLeak(t, fmt.Sprintf("%s, %s of cluster %s, decoded", what, key, name), js)
				}
			}
		}
	}
	// stop stops d, then checks the snapshot and the log of every run of the subtest.
	stop := func(t *testing.T, d *daemon, snapshot string) {
		t.Helper()
		d.stopGracefully(t)
		checkFile(t, "the snapshot", snapshot)
		checkObjects(t, "the snapshot", snapshot)
		log := logText(readLog(t, d))
		values.noLeak(t, "the log", log)
		// Sanity: client-go logged the bodies of the responses that hold no Secret.
		if !bytes.Contains(log, []byte("Response Body")) {
			t.Errorf("no response body was logged: is the verbosity %d?", secretsLogVerbosity)
		}
	}

	t.Run("full objects", func(t *testing.T) {
		// Without streaming lists, the informers LIST, and client-go logs the bodies of
		// the responses at verbosity 8: those of Secrets must not be.
		d := runSecretsDaemon(t, bin, writeConfig(snapshot, "  - name: secrets\n", ""), "fleetwatch.log", "KUBE_FEATURE_WatchListClient=false")
		waitReadyz(t, http.DefaultClient, base)
		converges("the Secrets served")
		watches := map[string]*secretsWatch{
			"watch":                          startSecretsWatch(t, base+"/clusters/*/api/v1/secrets?watch=true", ""),
			"watch of a Table of objects":    startSecretsWatch(t, base+"/clusters/prod"+secretsVaultPath+"?watch=true&includeObject=Object", secretsAcceptTable),
			"watch of PartialObjectMetadata": startSecretsWatch(t, base+"/clusters/prod"+secretsVaultPath+"?watch=true", secretsAcceptPartial),
		}
		for what, body := range readSecretsInAllForms(t, base, names) {
			values.noLeak(t, what, body)
		}
		// Changes come as watch events, whose objects the daemon decodes with their
		// encodings for the snapshot.
		apply(secretManifest("applied-stringdata", value("applied-stringdata-2"), false))
		apply(secretManifest("late", value("late"), false))
		names = append(names, "late")
		for what, w := range watches {
			eventually(t, 30*time.Second, what+" of the changes", func() string {
				body := w.read()
				if !bytes.Contains(body, []byte(`"late"`)) || !bytes.Contains(body, []byte("MODIFIED")) {
					return fmt.Sprintf("%.3000s", body)
				}
				return ""
			})
		}
		converges("the changed Secrets served")
		for what, w := range watches {
			values.noLeak(t, what, w.read())
		}
		stop(t, d, snapshot)
		log := logText(readLog(t, d))
		if !bytes.Contains(log, []byte("NamespaceList")) {
			t.Error("the body of no list response was logged")
		}
		if bytes.Contains(log, []byte("SecretList")) {
			t.Error("the body of a list of Secrets was logged")
		}
	})

	for _, encoding := range []string{"compact", "compressed"} {
		t.Run("full objects, "+encoding+" cache", func(t *testing.T) {
			// The same snapshot, warm: a compact cache holds the snapshot's encodings, and
			// the server writes its JSON from them (cache.encoding), compressed or not. An
			// attacker on the API tries every form, and selectors that would read the values.
			d := runSecretsDaemon(t, bin, writeConfig(snapshot, "  - name: secrets\n", "cache:\n  encoding: "+encoding+"\n"), "fleetwatch-"+encoding+".log")
			waitReadyz(t, http.DefaultClient, base)
			converges("the Secrets served from a " + encoding + " cache")
			watches := map[string]*secretsWatch{
				"watch":                          startSecretsWatch(t, base+"/clusters/*/api/v1/secrets?watch=true", ""),
				"watch from the start":           startSecretsWatch(t, base+"/clusters/prod/api/v1/secrets?watch=true&resourceVersion=0", ""),
				"watch of a Table of objects":    startSecretsWatch(t, base+"/clusters/prod"+secretsVaultPath+"?watch=true&includeObject=Object", secretsAcceptTable),
				"watch of PartialObjectMetadata": startSecretsWatch(t, base+"/clusters/prod"+secretsVaultPath+"?watch=true", secretsAcceptPartial),
			}
			apply(secretManifest("created", value("created-2"), false))
			late := "late-" + encoding
			apply(secretManifest(late, value(late), true))
			names = append(names, late)
			for what, w := range watches {
				eventually(t, 30*time.Second, what+" of the changes", func() string {
					if body := w.read(); !bytes.Contains(body, []byte(`"`+late+`"`)) {
						return fmt.Sprintf("%.3000s", body)
					}
					return ""
				})
			}
			converges("the changed Secrets served from a " + encoding + " cache")
			for what, body := range readSecretsInAllForms(t, base, names) {
				values.noLeak(t, what, body)
			}
			for _, v := range values {
				for _, q := range []string{
					"fieldSelector=data.password%3D" + url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(v))),
					"fieldSelector=stringData.password%3D" + url.QueryEscape(v),
					"labelSelector=password%3D" + url.QueryEscape(v),
				} {
					// A selector that matched would confirm a guessed value; the answer
					// may quote the attacker's own selector, so only what it selects counts.
					if r := get(ctx, t, http.DefaultClient, base+"/clusters/*/api/v1/secrets?"+q, ""); r.code == http.StatusOK && bytes.Contains(r.body, []byte(`"vault"`)) {
						t.Errorf("a selector on a value selects Secrets: %s: %.500s", q, r.body)
					}
				}
				if r := get(ctx, t, http.DefaultClient, base+"/apis/fleetwatch.io/v1alpha1/search?q="+url.QueryEscape(v), ""); bytes.Contains(r.body, []byte(`"vault"`)) {
					t.Errorf("a search for a value finds Secrets: %.500s", r.body)
				}
			}
			for what, w := range watches {
				values.noLeak(t, what, w.read())
			}
			stop(t, d, snapshot)
			if !strings.Contains(readLog(t, d), "encoding: "+encoding) {
				t.Errorf("the daemon's log does not show cache.encoding %s in its configuration", encoding)
			}
		})
	}

	t.Run("metadata-only with managedFields", func(t *testing.T) {
		d := runSecretsDaemon(t, bin, writeConfig(snapshot, "  - name: secrets\n    metadataOnly: true\n", "cache:\n  keepManagedFields: true\n"), "fleetwatch.log")
		waitReadyz(t, http.DefaultClient, base)
		converges("the Secrets served metadata-only")
		body := getAccepting(t, base+"/clusters/prod"+secretsVaultPath+"/applied-data", "")
		if !bytes.Contains(body, []byte("managedFields")) || !bytes.Contains(body, []byte("f:password")) {
			t.Errorf("the Secret has no managedFields:\n%s", body)
		}
		w := startSecretsWatch(t, base+"/clusters/*/api/v1/secrets?watch=true", "")
		for what, body := range readSecretsInAllForms(t, base, names) {
			values.noLeak(t, what, body)
		}
		eventually(t, 30*time.Second, "the watch's initial events", func() string {
			if body := w.read(); !bytes.Contains(body, []byte(`"late"`)) {
				return fmt.Sprintf("%.3000s", body)
			}
			return ""
		})
		values.noLeak(t, "the watch", w.read())
		stop(t, d, snapshot)
	})

	t.Run("a snapshot of an older version is scrubbed", func(t *testing.T) {
		old := filepath.Join(dir, "old.db")
		d := runSecretsDaemon(t, bin, writeConfig(old, "  - name: secrets\n", "cache:\n  keepSecretData: true\n"), "fleetwatch-keepSecretData.log")
		waitReadyz(t, http.DefaultClient, base)
		converges("the Secrets served with their values")
		if body := getAccepting(t, base+"/clusters/prod"+secretsVaultPath+"/applied-data", ""); values.leak(body) == "" {
			t.Fatalf("cache.keepSecretData: true serves no value:\n%s", body)
		}
		d.stopGracefully(t)
		downgradeSnapshot(t, old)
		if data, _ := os.ReadFile(old); values.leak(data) == "" {
			t.Fatal("the snapshot to upgrade holds no value")
		}
		// Changes while the daemon is down: the warm restart must see them.
		apply(secretManifest("created", value("created-2"), true), "--force-conflicts", "--server-side", "--field-manager", "e2e")
		kc("delete", "secret", "server-side", "-n", "vault")

		d = runSecretsDaemon(t, bin, writeConfig(old, "  - name: secrets\n", ""), "fleetwatch.log")
		waitReadyz(t, http.DefaultClient, base)
		converges("the Secrets served after the upgrade")
		if data, _ := os.ReadFile(old); values.leak(data) != "" {
			t.Errorf("the upgraded snapshot holds %s", values.leak(data))
		}
		for what, body := range readSecretsInAllForms(t, base, slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "server-side" })) {
			values.noLeak(t, what, body)
		}
		stop(t, d, old)
	})

	t.Run("cache.keepSecretData turned off", func(t *testing.T) {
		path := filepath.Join(dir, "flip.db")
		const secrets = "  - name: secrets\n"
		keep, drop := "cache:\n  keepSecretData: true\n", ""
		servesValues := func() bool {
			return values.leak(getAccepting(t, base+"/clusters/prod"+secretsVaultPath+"/applied-data", "")) != ""
		}
		d := runSecretsDaemon(t, bin, writeConfig(path, secrets, keep), "fleetwatch-keepSecretData.log")
		waitReadyz(t, http.DefaultClient, base)
		converges("the Secrets served with their values")
		if !servesValues() {
			t.Fatal("cache.keepSecretData: true serves no value")
		}
		d.stopGracefully(t)

		// Across a restart: the scope is dropped, and the file compacted, at start.
		d = runSecretsDaemon(t, bin, writeConfig(path, secrets, drop), "fleetwatch.log")
		waitReadyz(t, http.DefaultClient, base)
		converges("the Secrets served after the restart")
		checkFile(t, "the snapshot after the restart", path)
		if servesValues() {
			t.Error("values served after the restart")
		}
		d.stopGracefully(t)

		// By a reload: the next start compacts the file.
		d = runSecretsDaemon(t, bin, writeConfig(path, secrets, keep), "fleetwatch-keepSecretData.log")
		waitReadyz(t, http.DefaultClient, base)
		converges("the Secrets served with their values")
		writeConfig(path, secrets, drop)
		eventually(t, 60*time.Second, "the values dropped by the reload", func() string {
			// 404 while the Secrets are listed again.
			code, body := httpGet(t, base+"/clusters/prod"+secretsVaultPath+"/applied-data")
			if code != http.StatusOK || values.leak(body) != "" {
				return fmt.Sprintf("%d %.300s", code, body)
			}
			return ""
		})
		converges("the Secrets served after the reload")
		d.stopGracefully(t)
		d = runSecretsDaemon(t, bin, writeConfig(path, secrets, drop), "fleetwatch.log")
		waitReadyz(t, http.DefaultClient, base)
		converges("the Secrets served after the restart")
		stop(t, d, path)
	})
}

// downgradeSnapshot makes the snapshot at path, written by a daemon with
// cache.keepSecretData, look like one that a version before schema 3 wrote with the
// default configuration: schema version 2, its values without the seals of version 4,
// and the Secrets, with their values, under the resource key of the default
// configuration. Those versions kept the values in the last-applied annotation of kubectl
// apply.
func downgradeSnapshot(t *testing.T, path string) {
	t.Helper()
	scope := func(opts informer.Options) []byte {
		spec := opts.Spec(informer.Resource{Name: "secrets"})
		return []byte(informer.Scope{Resource: secretsGVR, Spec: spec}.String())
	}
	kept, plain := scope(informer.Options{KeepSecretData: true}), scope(informer.Options{})
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		if err := meta.Put([]byte("version"), binary.BigEndian.AppendUint64(nil, 2)); err != nil {
			return err
		}
		if err := meta.Delete([]byte("sum")); err != nil {
			return err
		}
		if err := unsealBoltBucket(tx.Bucket([]byte("clusters"))); err != nil {
			return err
		}
		resources := tx.Bucket([]byte("clusters")).Bucket([]byte("prod")).Bucket([]byte("resources"))
		from := resources.Bucket(kept)
		if from == nil {
			return fmt.Errorf("no resource %s in the snapshot", kept)
		}
		to, err := resources.CreateBucket(plain)
		if err != nil {
			return err
		}
		if err := copyBoltBucket(to, from); err != nil {
			return err
		}
		return resources.DeleteBucket(kept)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// unsealBoltBucket takes the seal of schema version 4 (a format byte 3 and a CRC-32C)
// off every value under b, as versions before it stored them.
func unsealBoltBucket(b *bolt.Bucket) error {
	type kv struct{ k, v []byte }
	var values []kv
	var buckets [][]byte
	err := b.ForEach(func(k, v []byte) error {
		if v == nil {
			buckets = append(buckets, bytes.Clone(k))
			return nil
		}
		if len(v) < 5 || v[0] != 3 {
			return fmt.Errorf("the value of %q is not sealed", k)
		}
		values = append(values, kv{bytes.Clone(k), bytes.Clone(v[5:])})
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range values {
		if err := b.Put(e.k, e.v); err != nil {
			return err
		}
	}
	for _, k := range buckets {
		if err := unsealBoltBucket(b.Bucket(k)); err != nil {
			return err
		}
	}
	return nil
}

func copyBoltBucket(to, from *bolt.Bucket) error {
	return from.ForEach(func(k, v []byte) error {
		if v != nil {
			return to.Put(k, v)
		}
		sub, err := to.CreateBucket(k)
		if err != nil {
			return err
		}
		return copyBoltBucket(sub, from.Bucket(k))
	})
}

// TestLogTextReadsHexDumps: a value in a body that client-go logged as a hex dump, as
// klog writes it, is found by a search of logText.
func TestLogTextReadsHexDumps(t *testing.T) {
	t.Parallel()
	body := append([]byte("k8s\x00\x0a\x0c"), "SecretList with s3cr3t-value-0123456789 inside"...)
	log := fmt.Sprintf("I1127 13:00:00.000000 1 request.go:1] \"Response Body\" body=<\n%s >\n", "\t"+strings.ReplaceAll(hex.Dump(body), "\n", "\n\t"))
	if strings.Contains(log, "s3cr3t-value-0123456789") {
		t.Fatalf("the dump holds the value as text, the test proves nothing:\n%s", log)
	}
	if !bytes.Contains(logText(log), []byte("s3cr3t-value-0123456789")) || !bytes.Contains(logText(log), []byte("SecretList")) {
		t.Errorf("logText does not read the dump:\n%s\n%q", log, logText(log))
	}
}
