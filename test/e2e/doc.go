// Package e2e holds fleetwatch's end-to-end tests. They run against real kube-apiservers
// backed by real etcd, started as processes by internal/testenv.
package e2e
