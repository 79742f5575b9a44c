package fleetwatch

import "github.com/fleetwatch/fleetwatch/aggregate"

// clusterObjects is a replica's cost of a cluster it owns (shard.Options.Cost, with
// shard.BalanceObjects): the objects its informers hold of the cluster, every
// configured resource summed. It is known only while the cluster is synced: a cluster
// still listing holds part of its objects, and publishing that part would move the
// cluster for a cost it does not have; an unreachable one keeps the cost its holder
// published last.
func (m *Manager) clusterObjects(name string) (int64, bool) {
	st, ok := m.status.Get(name)
	if !ok || st.Phase != aggregate.PhaseSynced {
		return 0, false
	}
	var n int64
	for _, r := range st.Resources {
		n += int64(r.Count)
	}
	return n, true
}
