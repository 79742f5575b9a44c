package shard

import (
	"hash/fnv"
	"slices"
)

// Owner returns the replica that rendezvous hashing (highest random weight) assigns
// cluster to among replicas, or "" if replicas is empty. Every replica that sees the
// same set computes the same owner, whatever the order of replicas. When a replica
// joins, it takes over only the clusters for which it now has the highest weight, about
// 1/N of them; when one leaves, only its own clusters move, each to the replica with the
// next highest weight.
func Owner(cluster string, replicas []string) string {
	var best string
	var bestWeight uint64
	for _, r := range replicas {
		w := weight(r, cluster)
		if best == "" || w > bestWeight || (w == bestWeight && r < best) {
			best, bestWeight = r, w
		}
	}
	return best
}

// Assign returns the owner of each cluster among replicas (see Owner).
func Assign(clusters, replicas []string) map[string]string {
	replicas = slices.Compact(slices.Sorted(slices.Values(replicas)))
	out := make(map[string]string, len(clusters))
	for _, c := range clusters {
		out[c] = Owner(c, replicas)
	}
	return out
}

// weight is the weight of replica for cluster: FNV-1a of both, separated by a byte that
// neither name can hold at that place, finished by splitmix64's mixer so that names that
// differ in their last bytes still spread over the whole range.
func weight(replica, cluster string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(replica))
	h.Write([]byte{0})
	h.Write([]byte(cluster))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
