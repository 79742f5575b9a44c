// Package deploy holds the Kubernetes manifests that run the fleetwatch daemon in a
// cluster: a kustomize base in base/, a component in components/home-cluster/ that
// grants reads in the cluster the daemon runs in, for when it is watched too, a component
// in components/sharded/ that runs it as a StatefulSet of replicas dividing the clusters
// (with overlays/sharded/ applying it, with the warm handover on), a component in
// components/cert-manager/ that has cert-manager issue the serving certificate, and an
// example overlay in overlays/example/ (see docs/deploy.md). The Helm chart of the same
// objects is in helm/fleetwatch/, with its tests in helm/, a module of its own. It has no Go API; its tests
// check that the configuration each kustomization generates is one the daemon accepts,
// and that the sharded overlay and the cert-manager component fit the pod. The
// end-to-end suite renders the kustomizations and applies them to a real apiserver.
package deploy
