package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/cluster"
)

// tokenFile holds the accepted bearer tokens, read from a file and read again when the
// file changes. Only the tokens' SHA-256 hashes are kept.
//
// Each line holds a token, optionally followed by space-separated fields:
//
//	TOKEN [user=NAME] [clusters=GLOB[,GLOB...]]
//
// user names the client in logs and Statuses (default "token-LINE"); clusters limits
// the clusters it may read to those matching one of the globs (cluster.ValidateGlob
// syntax; default every cluster). Blank lines and lines starting with # are ignored.
type tokenFile struct {
	path string

	// reloadMu serializes reloads, and guards stat.
	reloadMu sync.Mutex
	// stat identifies the version of the file that was read; nil if it could not be.
	stat os.FileInfo

	// mu guards entries, which a reload replaces and never modifies.
	mu      sync.Mutex
	entries []tokenEntry
}

// tokenEntry is one line of a token file.
type tokenEntry struct {
	hash [sha256.Size]byte
	line int
	user string
	// clusters is nil for a token that may read every cluster.
	clusters *cluster.Globs
}

// loadTokenFile reads a token file. It fails if the file cannot be read, holds a line
// that does not parse, or holds no token.
func loadTokenFile(path string) (*tokenFile, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	entries, err := readTokenFile(path)
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%s holds no token", path)
	}
	return &tokenFile{path: path, stat: fi, entries: entries}, nil
}

// reload reads the file again if it changed since it was last read; the server's
// filewatch.Follower calls it when the file may have changed. If the file cannot be
// read or parsed, no token is accepted until it can: a token file removed, or edited,
// to revoke a token must not leave the old tokens valid. Each failure is logged once.
func (t *tokenFile) reload(logger klog.Logger) {
	t.reloadMu.Lock()
	defer t.reloadMu.Unlock()
	fi, err := os.Stat(t.path)
	if err == nil && sameFile(fi, t.stat) {
		return
	}
	var entries []tokenEntry
	if err == nil {
		entries, err = readTokenFile(t.path)
	}
	t.mu.Lock()
	had := t.stat != nil || t.entries != nil
	if err != nil {
		t.entries, t.stat = nil, nil
	} else {
		t.entries, t.stat = entries, fi
	}
	t.mu.Unlock()
	switch {
	case err != nil && had:
		logger.Error(err, "Cannot read the token file; no token is accepted until it can be read", "path", t.path)
	case err == nil && had:
		logger.Info("Token file changed; tokens reloaded", "path", t.path, "tokens", len(entries))
	}
}

// readTokenFile reads and parses a token file. Its errors name the path and line, and
// never show a token.
func readTokenFile(path string) ([]tokenEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	entries, err := parseTokenFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s:%w", path, err)
	}
	return entries, nil
}

// parseTokenFile parses the lines of a token file. An error starts with the line
// number ("3: ...").
func parseTokenFile(data []byte) ([]tokenEntry, error) {
	var entries []tokenEntry
	seen := make(map[[sha256.Size]byte]int)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var errs []error
	n := 0
	for sc.Scan() {
		n++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		e, err := parseTokenLine(n, fields)
		if err != nil {
			errs = append(errs, fmt.Errorf("%d: %w", n, err))
			continue
		}
		if first, dup := seen[e.hash]; dup {
			errs = append(errs, fmt.Errorf("%d: the token of line %d again", n, first))
			continue
		}
		seen[e.hash] = n
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%d: %w", n+1, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return entries, nil
}

// parseTokenLine parses the fields of one line: the token, then key=value pairs. Its
// errors name a field by its position on the line, and quote nothing of it: a line that
// does not parse may hold a token in any field (two tokens on a line, a token with a
// space in it, a base64 token whose "=" looks like a key).
func parseTokenLine(n int, fields []string) (tokenEntry, error) {
	e := tokenEntry{hash: sha256.Sum256([]byte(fields[0])), line: n, user: fmt.Sprintf("token-%d", n)}
	set := make(map[string]bool)
	for i, f := range fields[1:] {
		field := i + 2
		key, value, ok := strings.Cut(f, "=")
		if !ok {
			return e, fmt.Errorf("field %d is not key=value (keys: user, clusters)", field)
		}
		if key != "user" && key != "clusters" {
			return e, fmt.Errorf("field %d has an unknown key (keys: user, clusters)", field)
		}
		if set[key] {
			return e, fmt.Errorf("%s is set twice", key)
		}
		set[key] = true
		switch key {
		case "user":
			if value == "" {
				return e, errors.New("user is empty")
			}
			e.user = value
		case "clusters":
			if value == "" {
				return e, errors.New("clusters is empty; leave it out to allow every cluster")
			}
			patterns := strings.Split(value, ",")
			g, err := cluster.CompileGlobs(patterns...)
			if err != nil {
				// The error of CompileGlobs quotes the glob.
				bad := slices.IndexFunc(patterns, func(p string) bool { return cluster.ValidateGlob(p) != nil })
				return e, fmt.Errorf("clusters: item %d is not a valid glob (the syntax of contexts.include)", bad+1)
			}
			e.clusters = &g
		}
	}
	return e, nil
}

// authenticate checks a bearer token. Every token is compared, in constant time, so the
// time taken tells nothing about which token nearly matched. It returns nil for a token
// the file does not hold.
func (t *tokenFile) authenticate(tok string) *principal {
	sum := sha256.Sum256([]byte(tok))
	t.mu.Lock()
	entries := t.entries
	t.mu.Unlock()
	match := -1
	for i := range entries {
		if subtle.ConstantTimeCompare(sum[:], entries[i].hash[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return nil
	}
	e := entries[match]
	p := &principal{name: e.user}
	if e.clusters != nil {
		p.access = globAccess{e.clusters}
	}
	return p
}

// globAccess limits a token of the token file to the clusters its globs match.
type globAccess struct{ globs *cluster.Globs }

var _ authorizer = globAccess{}

func (g globAccess) clusters(context.Context, []string) (func(string) bool, error) {
	return g.globs.Match, nil
}

// metrics denies /metrics, which names every cluster.
func (globAccess) metrics(context.Context) (bool, error) { return false, nil }
