// Command demo starts three local Kubernetes control planes (etcd and kube-apiserver
// processes, see internal/testenv) with sample workloads, runs `fleetwatch serve`
// against them, prints the kubectl commands to try, and keeps everything running until
// Ctrl-C. `make demo` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

func main() {
	os.Exit(run())
}

func run() int {
	dir := flag.String("dir", "", "directory for the clusters' data, logs, kubeconfig and snapshot (default: a new temporary directory, removed on exit)")
	fleetwatch := flag.String("fleetwatch", "bin/fleetwatch", "the fleetwatch binary")
	address := flag.String("address", "127.0.0.1:8080", "address of the inventory API")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Println("demo: starting 3 local clusters (etcd + kube-apiserver each)...")
	env, err := testenv.Start(ctx, testenv.Options{Names: []string{"prod-eu", "prod-us", "staging"}, Dir: *dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	defer func() {
		fmt.Println("demo: stopping the clusters...")
		if err := env.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
		}
	}()

	for i, c := range env.Clusters {
		opts := testenv.SampleOptions{Deployments: 2 + i, Replicas: 2}
		// The widgets CRD exists in two of the three clusters only.
		if i < 2 {
			if err := c.InstallWidgetCRD(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "demo:", err)
				return 1
			}
			opts.Widgets = 2
		}
		if err := c.Seed(ctx, opts); err != nil {
			fmt.Fprintf(os.Stderr, "demo: seeding %s: %v\n", c.Name, err)
			return 1
		}
	}

	// The daemon's config: a snapshot next to the clusters' data, the default inventory
	// resources plus the widgets CRD, which two of the three clusters serve.
	cfgPath := filepath.Join(env.Dir, "fleetwatch.yaml")
	cfg := fmt.Sprintf(`kubeconfig: [%q]
resources:
  - name: namespaces
  - name: nodes
  - name: pods
  - name: services
  - name: deployments.apps
  - name: configmaps
    metadataOnly: true
  - name: widgets.v1alpha1.example.com
snapshot:
  path: %q
server:
  address: %q
`, env.Kubeconfig, filepath.Join(env.Dir, "fleetwatch.db"), *address)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	logPath := filepath.Join(env.Dir, "fleetwatch.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	defer logFile.Close()
	daemon := exec.Command(*fleetwatch, "serve", "--config", cfgPath)
	daemon.Stdout, daemon.Stderr = logFile, logFile
	// Its own process group: Ctrl-C reaches the demo, which stops the daemon first.
	daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := daemon.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "demo: starting fleetwatch:", err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	defer func() {
		fmt.Println("demo: stopping fleetwatch...")
		_ = daemon.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(40 * time.Second):
			_ = daemon.Process.Kill()
		}
	}()
	base := "http://" + *address
	if err := waitReady(ctx, base+"/readyz", exited); err != nil {
		fmt.Fprintf(os.Stderr, "demo: fleetwatch did not get ready: %v (log: %s)\n", err, logPath)
		return 1
	}

	fmt.Printf(`
demo: 3 clusters (prod-eu, prod-us, staging) with sample workloads, and fleetwatch
serving them all at %[2]s (config %[3]s, log %[4]s).

Try:
  kubectl --server %[2]s/clusters/'*' get pods -A                 # every cluster, CLUSTER column
  kubectl --server %[2]s/clusters/prod-eu get deployments -A
  kubectl --server %[2]s/clusters/'*' get deployments.apps -l app=web -A -o json
  kubectl --server %[2]s/clusters/'*' get widgets -A              # the CRD is in two clusters
  kubectl --server %[2]s/clusters/'*' get pods -A -w              # then change something
  kubectl --server %[2]s get clusters.fleetwatch.io                # the clusters' status
  curl -s %[2]s/metrics | grep ^fleetwatch_
or open %[2]s/ in a browser: the fleet, search, and objects across clusters.

Change the clusters directly with:
  kubectl --kubeconfig %[1]s --context prod-us scale deployment web -n shop --replicas 5

Press Ctrl-C to stop everything.
`, env.Kubeconfig, base, cfgPath, logPath)
	select {
	case <-ctx.Done():
	case err := <-exited:
		fmt.Fprintf(os.Stderr, "demo: fleetwatch exited: %v (log: %s)\n", err, logPath)
		exited <- err
		return 1
	}
	return 0
}

// waitReady polls url until it answers 200, the daemon exits, or a minute passes.
func waitReady(ctx context.Context, url string, exited chan error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("fleetwatch exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
