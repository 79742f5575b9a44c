package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// serveReadyz serves /readyz in the apiserver's format: "ok" when ready, else (and with
// ?verbose) one line per check, [+] passed or [-] failed with the reason. It is ready
// once the Source is (every cluster has synced, or has timed out and serves its last
// known state) and the server's own cache has caught up with the fleet.
//
// The reasons name clusters, so when the server authenticates, a client without a
// principal (the kubelet's probes) gets "reason withheld", as from kube-apiserver, and
// one limited to some clusters sees only their names.
func (s *Server) serveReadyz(w http.ResponseWriter, r *http.Request) {
	type check struct {
		name string
		err  string
	}
	checks := []check{{name: "fleet"}, {name: "cache"}}
	withhold := s.authenticates() && principalFrom(r) == nil
	fleetReady := s.src.Ready()
	if !fleetReady {
		checks[0].err = "not ready"
		if !withhold {
			checks[0].err = s.notReadyReason(r)
		}
	}
	if !s.cacheReady(fleetReady) {
		checks[1].err = "the server's cache has not caught up with the fleet yet"
	}
	ready := checks[0].err == "" && checks[1].err == ""
	_, verbose := r.URL.Query()["verbose"]
	if ready && !verbose {
		writeBody(w, http.StatusOK, "text/plain; charset=utf-8", []byte("ok"))
		return
	}
	var b strings.Builder
	for _, c := range checks {
		switch {
		case c.err == "":
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		case withhold:
			fmt.Fprintf(&b, "[-]%s failed: reason withheld\n", c.name)
		default:
			fmt.Fprintf(&b, "[-]%s failed: %s\n", c.name, c.err)
		}
	}
	code := http.StatusOK
	if ready {
		b.WriteString("readyz check passed\n")
	} else {
		code = http.StatusServiceUnavailable
		b.WriteString("readyz check failed\n")
	}
	writeBody(w, code, "text/plain; charset=utf-8", []byte(b.String()))
}

// notReadyReason says why the fleet is not ready to the client of r: it names the
// clusters that hold readiness back and that the client may read. Which those are is
// decided first, as for any read; if that cannot be decided, the reason is withheld.
func (s *Server) notReadyReason(r *http.Request) string {
	if ns, ok := s.src.(NotSyncedSource); ok {
		if p := principalFrom(r); p == nil || p.access == nil {
			first, notSynced, all := ns.NotSynced(maxNotReadyNames)
			if all == 0 {
				return notReadyReason(nil, nil)
			}
			names := make([]string, len(first))
			for i, st := range first {
				names[i] = fmt.Sprintf("%q (%s)", st.Name, st.Phase)
			}
			return formatNotReady(names, notSynced-len(first), false)
		}
	}
	statuses := s.src.Status()
	var allow func(string) bool
	var names []string
	for _, st := range statuses {
		if !placedElsewhere(st) && st.Phase != aggregate.PhaseSynced {
			names = append(names, st.Name)
		}
	}
	if p := principalFrom(r); p != nil && p.access != nil && len(names) > 0 {
		var err error
		if allow, err = p.access.clusters(r.Context(), names); err != nil {
			return "reason withheld: " + err.Error()
		}
	}
	return notReadyReason(statuses, allow)
}

// notReadyReason names the clusters that hold readiness back, of those that allow
// admits (nil admits every cluster); the others are mentioned without their names.
func notReadyReason(statuses []aggregate.ClusterStatus, allow func(string) bool) string {
	if len(statuses) == 0 {
		return "no cluster has joined the fleet yet"
	}
	var names []string
	hidden, more := false, 0
	for _, st := range statuses {
		switch {
		case st.Phase == aggregate.PhaseSynced, placedElsewhere(st):
		case allow != nil && !allow(st.Name):
			hidden = true
		case len(names) == maxNotReadyNames:
			more++
		default:
			names = append(names, fmt.Sprintf("%q (%s)", st.Name, st.Phase))
		}
	}
	return formatNotReady(names, more, hidden)
}

// formatNotReady says that the clusters of names, and more, hold readiness back, and
// with hidden, clusters that the client may not read.
func formatNotReady(names []string, more int, hidden bool) string {
	switch {
	case len(names) == 0 && hidden:
		return "clusters that you may not read are not synced"
	case len(names) == 0:
		return "clusters are synced, but the fleet is not ready yet"
	}
	if more > 0 {
		names = append(names, fmt.Sprintf("and %d more", more))
	}
	if hidden {
		names = append(names, "and clusters that you may not read")
	}
	return "clusters not synced: " + strings.Join(names, ", ")
}

// maxNotReadyNames is how many clusters the reason of a failed /readyz names: the first
// by name, and how many more there are. A fleet of thousands starting cold would
// otherwise name every one of them at each probe.
const maxNotReadyNames = 10

// placedElsewhere reports whether another replica of a sharded fleet is to watch the
// cluster: it does not hold this one's readiness back.
func placedElsewhere(st aggregate.ClusterStatus) bool {
	return st.Phase == aggregate.PhaseRemote || st.Phase == aggregate.PhaseMoving
}

// cacheReady reports whether the watch cache holds what the fleet held when it was first
// seen ready (Server.caughtUp), fleetReady being whether it is ready now: until then,
// a list could miss objects that the fleet serves, such as those of a warm start's
// snapshot that the cache has not been delivered yet.
func (s *Server) cacheReady(fleetReady bool) bool {
	select {
	case <-s.cache.primed:
	default:
		return false
	}
	ch := s.caughtUp(fleetReady)
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
