package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// auditPolicy records the lists and watches an apiserver serves, at the level that holds
// the user agent and the resource, when they start streaming and when they end.
const (
	auditPolicyFile = "audit-policy.yaml"
	auditPolicy     = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["watch", "list"]
- level: None
`
)

func (c *Cluster) auditArgs() []string {
	return []string{
		"--audit-policy-file=" + filepath.Join(c.env.Dir, auditPolicyFile),
		"--audit-log-path=" + c.AuditLog(),
		// Each event is written before the request goes on, so that the log is
		// complete when a test reads it.
		"--audit-log-mode=blocking",
		"--audit-log-format=json",
	}
}

// AuditLog is the path of the apiserver's audit log (Options.AuditWatches).
func (c *Cluster) AuditLog() string { return filepath.Join(c.dir, "audit.log") }

// Watch is one watch (or list) request that an apiserver served, from its audit log.
type Watch struct {
	AuditID string
	// Verb is "watch" or "list"; URI is the request's path and query, as
	// "/api/v1/configmaps?allowWatchBookmarks=true&resourceVersion=42&watch=true".
	Verb, URI string
	UserAgent string
	// Resource is the watched resource, as "configmaps" or "deployments.apps".
	Resource string
	// Start is when the apiserver began to stream the watch; End when it ended, zero
	// while it is open.
	Start, End time.Time
}

// Open reports whether the watch was still open at t.
func (w Watch) Open(t time.Time) bool {
	return !w.Start.After(t) && (w.End.IsZero() || w.End.After(t))
}

// auditEvent is the part of an audit.k8s.io/v1 Event that Watches reads.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	ObjectRef  *struct {
		Resource string `json:"resource"`
		APIGroup string `json:"apiGroup"`
	} `json:"objectRef"`
	StageTimestamp time.Time `json:"stageTimestamp"`
}

// request is the request that e starts.
func (e *auditEvent) request() *Watch {
	w := &Watch{AuditID: e.AuditID, Verb: e.Verb, URI: e.RequestURI, UserAgent: e.UserAgent, Start: e.StageTimestamp}
	if e.ObjectRef != nil {
		w.Resource = strings.Join(slices.DeleteFunc([]string{e.ObjectRef.Resource, e.ObjectRef.APIGroup}, func(s string) bool { return s == "" }), ".")
	}
	return w
}

// Watches returns the watches the apiserver has served so far, in the order they
// started, from its audit log (Options.AuditWatches). A watch that ended before it
// streamed (an error answered at once) is left out. A watch that the apiserver did not
// see end because it was killed stays open.
func (c *Cluster) Watches() ([]Watch, error) {
	all, err := c.Requests()
	return slices.DeleteFunc(all, func(w Watch) bool { return w.Verb != "watch" }), err
}

// Requests returns the watches (see Watches) and the lists that the apiserver has served
// so far, in the order they started, from its audit log (Options.AuditWatches).
func (c *Cluster) Requests() ([]Watch, error) {
	f, err := os.Open(c.AuditLog())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	byID := map[string]*Watch{}
	var order []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// The last line may be half written.
			continue
		}
		if e.Verb != "watch" && e.Verb != "list" {
			continue
		}
		switch e.Stage {
		case "ResponseStarted":
			byID[e.AuditID] = e.request()
			order = append(order, e.AuditID)
		case "ResponseComplete", "Panic":
			w := byID[e.AuditID]
			if w == nil && e.Verb == "list" {
				// A list answers at once: it has no ResponseStarted stage.
				w = e.request()
				byID[e.AuditID] = w
				order = append(order, e.AuditID)
			}
			if w != nil {
				w.End = e.StageTimestamp
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", c.AuditLog(), err)
	}
	out := make([]Watch, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	return out, nil
}
