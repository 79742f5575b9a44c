// Command template prints the manifests of fleetwatch's Helm chart, as `helm template`
// does, with Helm's Go module rather than a helm binary: the end-to-end suite (test/e2e)
// runs it and applies what it prints to a real apiserver.
//
//	go run ./cmd/template [-f values.yaml]... [-namespace NS] [-name RELEASE] CHART
package main

import (
	"flag"
	"fmt"
	"os"

	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/fleetwatch/fleetwatch/deploy/helm"
)

// valueFiles is the repeatable -f flag.
type valueFiles []string

func (f *valueFiles) String() string     { return fmt.Sprint(*f) }
func (f *valueFiles) Set(v string) error { *f = append(*f, v); return nil }

func main() { os.Exit(run()) }

func run() int {
	var files valueFiles
	var opts helm.Options
	flag.Var(&files, "f", "a values file, over the chart's values.yaml and the files before it (repeatable)")
	flag.StringVar(&opts.Namespace, "namespace", "fleetwatch", "the release's namespace")
	flag.StringVar(&opts.ReleaseName, "name", "fleetwatch", "the release's name")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: template [-f values.yaml]... [-namespace NS] [-name RELEASE] CHART")
		return 2
	}
	values := map[string]any{}
	for _, f := range files {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		values = chartutil.MergeTables(v.AsMap(), values)
	}
	out, err := helm.Render(flag.Arg(0), helm.Options{ReleaseName: opts.ReleaseName, Namespace: opts.Namespace, Values: values})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Print(out)
	return 0
}
