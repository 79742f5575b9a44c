// Package clustertest helps test code that uses package cluster: it writes kubeconfig
// files the way kubectl and editors do (a temporary file renamed over the old one), and
// it runs a fake kube-apiserver that serves what package cluster reads, the kube-system
// namespace and the health endpoints, and that can be made to fail.
//
// The fake server is for the identity read and the health probe only. Code under test
// must not depend on it: tests against real kube-apiservers use the same kubeconfig
// files and the same code paths.
package clustertest
