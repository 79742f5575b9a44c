// Package helm renders fleetwatch's Helm chart, deploy/helm/fleetwatch, with Helm's Go
// module, as `helm template` does: Render takes the chart's directory and the values,
// and returns the manifests. Its tests lint the chart (Helm's lint package), render it
// with the values of each kind of install, load the daemon's configuration the chart
// renders, reject bad values with the schema's errors, and compare the chart's objects
// with the kustomize base's and the sharded overlay's (deploy/base,
// deploy/overlays/sharded), object by object. The command in cmd/template prints a
// rendering, for the end-to-end suite (test/e2e), which applies it to a real apiserver.
package helm
