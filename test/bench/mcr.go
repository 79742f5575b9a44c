package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"
)

// The controller contenders run examples/multicluster-runtime, multicluster-runtime's
// uniform reconciler over every ConfigMap of every cluster, on two providers: fleetwatch's
// (mcprovider: one cache for the fleet, warm from a snapshot) and multicluster-runtime's
// kubeconfig provider (a controller-runtime cache per cluster, listed on every start,
// without managedFields: the example's --strip-managed-fields, on by default), which
// reads the clusters' kubeconfigs from Secrets of a host cluster, the first one.
const (
	mcrFleetwatch = "fleetwatch"
	mcrKubeconfig = "kubeconfig"
	// mcrNamespace holds the kubeconfig Secrets in the host cluster.
	mcrNamespace = "mcr-kubeconfigs"
	// mcrSecretLabel is the label by which the kubeconfig provider finds them.
	mcrSecretLabel = "sigs.k8s.io/multicluster-runtime-kubeconfig"
	// mcrFewNamespace is where the controllers' baseline runs (--namespaces): a
	// namespace with a few ConfigMaps, which the apiservers write themselves, and none
	// of the bench's.
	mcrFewNamespace = "kube-system"
)

// mcrResult is what the driver measured of one run of the controller, from outside the
// process: the requests it prints, its /proc status, and the apiservers' list figures.
type mcrResult struct {
	Provider string `json:"provider"`
	// Resource is what the controller reconciled: configmaps, or pods (--resource).
	Resource string `json:"resource,omitempty"`
	Warm     bool   `json:"warm"`
	// Compact is set for fleetwatch's provider over a compact fleet (--encoding compact
	// or compressed).
	Compact bool `json:"compact,omitempty"`
	// Compressed is set for a compact fleet that compresses its encodings (--encoding
	// compressed or compressed-dict), Dictionary for one that compresses them with a
	// dictionary per resource (compressed-dict).
	Compressed bool `json:"compressed,omitempty"`
	Dictionary bool `json:"dictionary,omitempty"`
	// Expected is the number of objects of Resource in the clusters, one request each.
	Expected int `json:"expected"`
	// FirstSec and AllSec are the times from the process start to its first request and
	// to the request of every object.
	FirstSec float64 `json:"firstSec"`
	AllSec   float64 `json:"allSec"`
	// HeapAfterGC and RSSAfterGC are what the controller printed once every object
	// was reconciled and it had collected garbage (--memstats-after); PeakRSS is VmHWM
	// then.
	HeapAfterGC uint64       `json:"heapAfterGC"`
	RSSAfterGC  uint64       `json:"rssAfterGC"`
	PeakRSS     uint64       `json:"peakRSS"`
	Lists       listCounters `json:"lists"`
}

// buildMCRExample builds examples/multicluster-runtime, a module of its own, into dir.
func buildMCRExample(dir string) (string, error) {
	out := filepath.Join(dir, "mcr-example")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = "examples/multicluster-runtime"
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build examples/multicluster-runtime: %w\n%s", err, b)
	}
	return out, nil
}

// mcrSetup writes, into the first cluster, the Secrets that give the kubeconfig provider
// every cluster, named after it.
func (d *driver) mcrSetup(ctx context.Context) error {
	host := d.env.Clusters[0].Clientset()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mcrNamespace}}
	if _, err := host.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, c := range d.env.Clusters {
		kubeconfig, err := clientcmd.Write(*d.env.KubeconfigFor(c))
		if err != nil {
			return err
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: mcrNamespace, Name: c.Name, Labels: map[string]string{mcrSecretLabel: "true"}},
			Data:       map[string][]byte{"kubeconfig": kubeconfig},
		}
		if _, err := host.CoreV1().Secrets(mcrNamespace).Create(ctx, s, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = host.CoreV1().Secrets(mcrNamespace).Update(ctx, s, metav1.UpdateOptions{})
			if err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
	}
	return nil
}

// mcrExpected returns the keys of the requests of every object of resource (configmaps
// or pods) in namespace (empty for all), as the controller prints them: "cluster
// namespace/name".
func (d *driver) mcrExpected(ctx context.Context, resource, namespace string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, c := range d.env.Clusters {
		list, err := metadata.NewForConfigOrDie(c.RESTConfig()).Resource(corev1.SchemeGroupVersion.WithResource(resource)).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			out[fmt.Sprintf("%s %s/%s", c.Name, o.Namespace, o.Name)] = true
		}
	}
	return out, nil
}

// mcrPhase runs the controller of ConfigMaps on the kubeconfig provider, and on
// fleetwatch's cold (with a new snapshot) and warm (from that snapshot), over a plain
// fleet, a compact one and a compressed one; then the controller of Pods on the
// kubeconfig provider and on fleetwatch's over a compressed fleet, cold and warm. Each
// in an order that rotates with r.
func (d *driver) mcrPhase(ctx context.Context, r int, rr *runResult) error {
	expected, err := d.mcrExpected(ctx, "configmaps", "")
	if err != nil {
		return err
	}
	pods, err := d.mcrExpected(ctx, "pods", "")
	if err != nil {
		return err
	}
	// The controllers over the ConfigMaps of mcrFewNamespace alone, a few: what each
	// process holds besides its objects, so that the memory of an object is what a
	// process over every ConfigMap holds beyond it.
	few, err := d.mcrExpected(ctx, "configmaps", mcrFewNamespace)
	if err != nil {
		return err
	}
	if len(few) == 0 {
		return fmt.Errorf("no ConfigMap in %s, which the controllers' baseline reconciles", mcrFewNamespace)
	}
	snapPath := filepath.Join(d.workDir, "mcr-fleetwatch.db")
	name := func(s string) string { return fmt.Sprintf("run%d-mcr-%s", r+1, s) }
	units := []func() error{
		func() error {
			rr.MCRKubeconfig, err = d.mcrContend(ctx, name("kubeconfig"), expected, false,
				"--provider", mcrKubeconfig, "--kubeconfig", filepath.Join(d.workDir, "mcr-host.kubeconfig"), "--namespace", mcrNamespace)
			return err
		},
		func() error {
			rr.MCRFleetwatch, rr.MCRFleetwatchWarm, err = d.mcrFleetwatch(ctx, name("fleetwatch"), snapPath, expected, "--encoding", "objects")
			return err
		},
		func() error {
			rr.MCRCompact, rr.MCRCompactWarm, err = d.mcrFleetwatch(ctx, name("fleetwatch-compact"), snapPath, expected, "--encoding", "compact")
			return err
		},
		func() error {
			rr.MCRCompressed, rr.MCRCompressedWarm, err = d.mcrFleetwatch(ctx, name("fleetwatch-compressed"), snapPath, expected, "--encoding", d.compressedEncoding())
			return err
		},
		func() error {
			rr.MCRKubeconfigFew, err = d.mcrContend(ctx, name("kubeconfig-few"), few, false,
				"--provider", mcrKubeconfig, "--kubeconfig", filepath.Join(d.workDir, "mcr-host.kubeconfig"), "--namespace", mcrNamespace, "--namespaces", mcrFewNamespace)
			return err
		},
		func() error {
			rr.MCRCompressedFew, rr.MCRCompressedFewWarm, err = d.mcrFleetwatch(ctx, name("fleetwatch-compressed-few"), snapPath, few, "--encoding", d.compressedEncoding(), "--namespaces", mcrFewNamespace)
			return err
		},
	}
	if err := d.env.WriteKubeconfig(filepath.Join(d.workDir, "mcr-host.kubeconfig"), d.env.Clusters[0]); err != nil {
		return err
	}
	for k := range units {
		if err := units[(k+r)%len(units)](); err != nil {
			return err
		}
	}
	podUnits := []func() error{
		func() error {
			rr.MCRPodsKubeconfig, err = d.mcrContend(ctx, name("pods-kubeconfig"), pods, false,
				"--provider", mcrKubeconfig, "--kubeconfig", filepath.Join(d.workDir, "mcr-host.kubeconfig"), "--namespace", mcrNamespace, "--resource", "pods")
			return err
		},
		func() error {
			rr.MCRPodsCompressed, rr.MCRPodsCompressedWarm, err = d.mcrFleetwatch(ctx, name("pods-fleetwatch-compressed"), snapPath, pods, "--encoding", d.compressedEncoding(), "--resource", "pods")
			return err
		},
	}
	for k := range podUnits {
		if err := podUnits[(k+r)%len(podUnits)](); err != nil {
			return err
		}
	}
	return nil
}

// mcrFleetwatch runs the controller on fleetwatch's provider cold, with a new snapshot,
// then warm from it; fleet are the example's flags of the fleet (--encoding, --resource).
func (d *driver) mcrFleetwatch(ctx context.Context, name, snapPath string, expected map[string]bool, fleet ...string) (cold, warm *mcrResult, err error) {
	for _, p := range []string{snapPath, snapPath + "-lock"} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return nil, nil, err
		}
	}
	args := append([]string{"--provider", mcrFleetwatch, "--kubeconfigs", d.env.Kubeconfig, "--snapshot", snapPath}, fleet...)
	if cold, err = d.mcrContend(ctx, name+"-cold", expected, false, args...); err != nil {
		return nil, nil, err
	}
	warm, err = d.mcrContend(ctx, name+"-warm", expected, true, args...)
	return cold, warm, err
}

// mcrContend runs the controller once, until every object of expected was requested,
// measures it, and stops it gracefully.
func (d *driver) mcrContend(ctx context.Context, name string, expected map[string]bool, warm bool, args ...string) (*mcrResult, error) {
	before, err := d.listCounters(ctx)
	if err != nil {
		return nil, err
	}
	res := &mcrResult{Provider: args[1], Resource: flagValue(args, "--resource", "configmaps"), Warm: warm, Expected: len(expected)}
	if args[1] == mcrFleetwatch {
		enc := flagValue(args, "--encoding", "compressed-dict")
		res.Compact, res.Compressed, res.Dictionary = enc != "objects", strings.HasPrefix(enc, "compressed"), enc == "compressed-dict"
	}
	logFile, err := os.Create(filepath.Join(d.logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	flags := []string{"--print-requests", "--memstats-after", strconv.Itoa(len(expected))}
	if d.opts.profileDir != "" {
		flags = append(flags, "--cpuprofile", filepath.Join(d.opts.profileDir, name+".cpu.pprof"), "--memprofile", filepath.Join(d.opts.profileDir, name+".heap.pprof"))
	}
	cmd := exec.CommandContext(ctx, d.mcrExample, append(flags, args...)...)
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	all, measured := make(chan struct{}), make(chan struct{})
	go func() {
		seen := map[string]bool{}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m, ok := strings.CutPrefix(sc.Text(), "memstats "); ok {
				if _, err := fmt.Sscan(m, &res.HeapAfterGC, &res.RSSAfterGC); err == nil {
					close(measured)
				}
				continue
			}
			req, ok := strings.CutPrefix(sc.Text(), "reconcile ")
			if !ok {
				continue
			}
			if len(seen) == 0 {
				res.FirstSec = time.Since(start).Seconds()
			}
			if expected[req] && !seen[req] {
				seen[req] = true
				if len(seen) == len(expected) {
					res.AllSec = time.Since(start).Seconds()
					close(all)
				}
			}
		}
	}()
	for _, c := range []chan struct{}{all, measured} {
		select {
		case <-c:
		case <-time.After(10 * time.Minute):
			return nil, fmt.Errorf("%s: not every one of %d %s was reconciled and measured within 10 minutes; see %s", name, len(expected), res.Resource, logFile.Name())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	res.PeakRSS = readStatus(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))["VmHWM"]
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return nil, err
		}
	case <-time.After(60 * time.Second):
		return nil, fmt.Errorf("%s did not stop within 60s of SIGTERM", name)
	}
	after, err := d.listCounters(ctx)
	if err != nil {
		return nil, err
	}
	res.Lists = after.minus(before)
	log.Printf("%-40s first request %.2fs, all %d reconciled %.2fs, heap %s, RSS %s, peak RSS %s, objects listed %.0f", name,
		res.FirstSec, res.Expected, res.AllSec, mib(res.HeapAfterGC), mib(res.RSSAfterGC), mib(res.PeakRSS), res.Lists.Objects)
	return res, nil
}

// flagValue is the value that args give flag ("--flag value"), or def.
func flagValue(args []string, flag, def string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return def
}

// mcrPerObject is b per reconciled object, in KiB.
func mcrPerObject(b uint64, r *mcrResult) float64 {
	return float64(b) / 1024 / float64(max(r.Expected, 1))
}

// compressedEncoding is the example's --encoding of its compressed contenders.
func (d *driver) compressedEncoding() string {
	if d.opts.compressDict {
		return "compressed-dict"
	}
	return "compressed"
}
