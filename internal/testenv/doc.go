// Package testenv starts real Kubernetes control planes as local processes for tests,
// benchmarks and the demo.
//
// An Env holds N independent clusters. Each Cluster is one etcd and one kube-apiserver,
// built from Go modules by hack/build-tools.sh, listening on free loopback ports. The Env
// writes one kubeconfig file with one context per cluster, authenticated as an admin
// (group system:masters) by a static bearer token.
//
// A Cluster offers the faults that fleetwatch's tests need: stop, kill -9 and restart its
// apiserver on the same etcd data; pause and resume it (SIGSTOP/SIGCONT) so that it looks
// unreachable; recreate it from empty etcd data, which gives it a new kube-system UID;
// compact its etcd; and read its apiserver's /metrics.
//
// The pods of fleetwatch's benchmarks (LargePod, SmallPod) are written from here, so that
// the harness (test/bench) and the Go micro-benchmarks cache the same objects.
//
// Every process is started with a parent-death signal, and Close stops them all, so
// nothing outlives the test binary. New wires Close into t.Cleanup and fails the test
// with the reason when the clusters cannot start; the suite skips instead only when
// FLEETWATCH_E2E_SKIP is set, which CI never does.
package testenv
