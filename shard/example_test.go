package shard_test

import (
	"fmt"

	"github.com/fleetwatch/fleetwatch/shard"
)

// Every replica computes the same owner from the same members, and a replica that joins
// takes only the clusters it now weighs highest.
func ExampleAssign() {
	clusters := []string{"member-1", "member-2", "member-3", "member-4"}
	before := shard.Assign(clusters, []string{"fleetwatch-0", "fleetwatch-1"})
	after := shard.Assign(clusters, []string{"fleetwatch-0", "fleetwatch-1", "fleetwatch-2"})
	for _, c := range clusters {
		fmt.Printf("%s: %s -> %s\n", c, before[c], after[c])
	}
	// Output:
	// member-1: fleetwatch-1 -> fleetwatch-1
	// member-2: fleetwatch-0 -> fleetwatch-0
	// member-3: fleetwatch-1 -> fleetwatch-2
	// member-4: fleetwatch-1 -> fleetwatch-1
}

// A peer finds a cluster's owner from two Leases in the home cluster: the cluster's,
// whose holder is the owner, and the owner's, which says how to reach it.
func ExampleClusterLeaseName() {
	fmt.Println(shard.ClusterLeaseName("arn:aws:eks:eu-west-1:123:cluster/prod"))
	fmt.Println(shard.ReplicaLeaseName("fleetwatch-0"))
	// Output:
	// fleetwatch-cluster-arn-aws-eks-eu-west-1-123-cluster-prod-423c4cd6e3
	// fleetwatch-replica-fleetwatch-0
}
