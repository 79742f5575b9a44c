// Package e2e holds fleetwatch's end-to-end tests. They run against real kube-apiservers
// backed by real etcd, started as processes by internal/testenv.
//
// Each test starts the clusters, daemons and files it uses and shares none of them, so
// every test calls t.Parallel: go test runs as many at once as -parallel says, GOMAXPROCS
// by default (two on CI's 2-core machines, where the suite takes about 12 minutes
// instead of 16 one at a time). Most of a test's time is spent waiting for processes to
// start, sync or stop. A new test does the same; one that cannot share the machine (a
// timing it asserts) must say why it does not call t.Parallel.
package e2e
