// Command demo starts three local Kubernetes control planes (etcd and kube-apiserver
// processes, see internal/testenv) with sample workloads, prints the kubeconfig that
// reaches them, and keeps them running until Ctrl-C. `make demo` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

func main() {
	os.Exit(run())
}

func run() int {
	dir := flag.String("dir", "", "directory for the clusters' data, logs and kubeconfig (default: a new temporary directory, removed on exit)")
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

	fmt.Printf(`
demo: 3 clusters are running with sample workloads.

  kubeconfig: %[1]s

Try:
  kubectl --kubeconfig %[1]s config get-contexts
  kubectl --kubeconfig %[1]s --context prod-eu get deployments,services,pods -A
  kubectl --kubeconfig %[1]s --context staging get widgets -A   # the CRD is not installed here

Press Ctrl-C to stop everything.
`, env.Kubeconfig)
	<-ctx.Done()
	return 0
}
