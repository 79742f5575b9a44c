// Package v1alpha1 holds the types of fleetwatch's own API, fleetwatch.io/v1alpha1, as
// the daemon serves them (package server) and its clients read them (package client):
// the annotations that the objects of the fleet carry, and the answer of the search
// (docs/search.md). It depends on apimachinery only, so that a client imports nothing of
// the daemon.
package v1alpha1
