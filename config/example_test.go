package config_test

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/fleetwatch/fleetwatch/config"
)

// Package main defines the flags with BindFlags, parses the command line, and loads.
// Flags set on the command line win over FLEETWATCH_* variables, which win over the
// file.
func ExampleLoad() {
	fs := pflag.NewFlagSet("fleetwatch serve", pflag.ContinueOnError)
	config.BindFlags(fs)
	if err := fs.Parse([]string{"--config=testdata/example.yaml", "--log-verbosity=2"}); err != nil {
		fmt.Println(err)
		return
	}
	env := map[string]string{"FLEETWATCH_SERVER_ADDRESS": "127.0.0.1:9090"}
	c, err := config.Load(config.LoadOptions{
		Flags: fs,
		// LookupEnv defaults to os.LookupEnv; this example fixes the environment.
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Println("kubeconfig:", c.Kubeconfig) // relative to the file
	fmt.Println("include:", c.Contexts.Include)
	fmt.Println("resources:", len(c.Resources))
	fmt.Printf("snapshot: %q\n", c.Snapshot.Path)
	fmt.Println("address:", c.Server.Address)
	fmt.Println("verbosity:", c.Log.Verbosity)
	// Output:
	// kubeconfig: [testdata/kubeconfigs]
	// include: [prod-*]
	// resources: 2
	// snapshot: ""
	// address: 127.0.0.1:9090
	// verbosity: 2
}

// Every problem is reported at once, each naming the key and where its value came from.
func ExampleLoad_errors() {
	_, err := config.Load(config.LoadOptions{
		File:      "testdata/invalid.yaml",
		LookupEnv: func(k string) (string, bool) { return "0", k == "FLEETWATCH_SYNC_MAXCONCURRENT" },
	})
	fmt.Println(err)
	// Output:
	// testdata/invalid.yaml:2: contexts.include[1]: invalid glob "[staging": missing ']'
	// testdata/invalid.yaml:5: resources[0].labelSelector: "app in (web": unable to parse requirement: found '', expected: ',' or ')'
	// testdata/invalid.yaml:7: resources[1].metadataonly: unknown key (did you mean "metadataOnly"?)
	// testdata/invalid.yaml:8: resources[2].name: "pods" is already configured by resources[0]
	// testdata/invalid.yaml:10: sync.timeout: expected a duration such as "90s" or "2m", got the integer 120
	// testdata/invalid.yaml:12: server.tls.certFile: required because server.address "0.0.0.0:8080" is not a loopback address
	// testdata/invalid.yaml:12: server.tls.keyFile: required because server.address "0.0.0.0:8080" is not a loopback address
	// testdata/invalid.yaml:12: server.auth.tokenFile: required (or server.auth.delegated.enabled) because server.address "0.0.0.0:8080" is not a loopback address
	// env FLEETWATCH_SYNC_MAXCONCURRENT: sync.maxConcurrent: must be at least 1, got 0
}

// String writes the effective configuration in the form of the file. It holds no
// secrets, so it can be logged.
func ExampleConfig_String() {
	c := config.Default()
	c.Resources = []config.Resource{{Name: "pods", Namespaces: []string{"default"}}}
	fmt.Print(c.String())
	// Output:
	// kubeconfig: []
	// contexts:
	//   include: ['*']
	//   exclude: []
	//   aliases: {}
	// resources:
	//   - name: pods
	//     namespaces: [default]
	// sync:
	//   timeout: 2m
	//   maxConcurrent: 256
	//   maxObjects: 100000
	// health:
	//   path: /readyz
	//   interval: 30s
	//   timeout: 5s
	// cache:
	//   encoding: compact
	//   keepManagedFields: false
	//   keepSecretData: false
	//   jsonOnly: false
	// snapshot:
	//   path: fleetwatch.db
	//   interval: 5s
	//   maxPending: 5000
	//   keepCorrupt: 3
	// history:
	//   enabled: false
	//   retention: 24h
	//   maxBytes: 38654705664
	// server:
	//   address: 127.0.0.1:8080
	//   acceptHosts: []
	//   tls:
	//     certFile: ""
	//     keyFile: ""
	//   auth:
	//     tokenFile: ""
	//     delegated:
	//       enabled: false
	//       kubeconfig: ""
	//       audiences: []
	//       qps: 200
	//       burst: 400
	//   limits:
	//     maxRequestsInFlight: 32
	//     maxWatches: 512
	//     maxWatchesPerClient: 128
	// shard:
	//   enabled: false
	//   identity: ""
	//   namespace: ""
	//   homeKubeconfig: ""
	//   address: ""
	//   leaseDuration: 15s
	//   renewDeadline: 10s
	//   retryPeriod: 2s
	//   replicas: 0
	//   startTimeout: 1m
	//   handoverTimeout: 10s
	//   parallelReceives: 4
	//   balance: count
	//   peerCaFile: ""
	// log:
	//   verbosity: 0
	//   format: text
}
