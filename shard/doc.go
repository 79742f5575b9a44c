// Package shard runs a fleet across replicas: each cluster is watched by one replica at
// a time, chosen by rendezvous hashing over the live replicas, with coordination.k8s.io
// Leases in a home cluster as the only coordination.
//
// A Coordinator sits between a cluster.Provider and the Aware that watches clusters (a
// fleetwatch.Manager): the Provider engages every selected cluster with the Coordinator,
// which engages with its Aware only the clusters this replica owns.
//
//	Provider ──► Coordinator ──► Aware.Engage      owned: its cluster Lease is held
//	                  │      ──► Aware.Disengage   moved: informers stopped, then released
//	                  ▼
//	   home cluster: Lease fleetwatch-replica-<identity>  (membership, renewed)
//	                 Lease fleetwatch-cluster-<name>-<hash> (holder: the owning replica)
//
// Each replica renews a Lease of its own; the replicas whose Leases are renewed are the
// members, and Owner assigns each cluster to one of them (HRW), so that a change of
// membership moves about 1/N of the clusters; with Options.Balance BalanceObjects,
// AssignByCost does, bounding each replica's share of the objects that the clusters'
// holders publish on their Leases (CostAnnotation). A cluster's owner takes its cluster Lease
// before it engages the cluster, and releases it only after the cluster was disengaged.
// A cluster Lease is held for as long as its holder's replica Lease is renewed: it is
// written only when a cluster changes hands, never renewed on its own, and watched by
// the replicas, which list the replica Leases at every round. Replicas started together
// wait for each other (Options.Replicas) before they take clusters, so that each cluster
// is taken once, by its owner. A replica that cannot renew its Lease within
// RenewDeadline disengages every cluster before its Lease can expire for the others
// (LeaseDuration). A process started with the identity of one that holds its Lease (a
// restart after a kill) waits for that Lease to expire, marking it meanwhile
// (SuccessorAnnotation), so that the others leave the identity's clusters to it.
//
// Of fleetwatch it imports only cluster.
package shard
