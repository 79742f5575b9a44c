package server

import (
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// hostFilter decides which hosts the server answers for, from the Host header of each
// request, as kubectl proxy's --accept-hosts does. It guards against DNS rebinding: a
// web page on attacker.example that has its name resolve to 127.0.0.1 makes the browser
// send requests, with "Host: attacker.example", to a server on loopback, and read the
// answers as its own. Such a page cannot send a bearer token it does not know, so the
// filter matters where the server does not authenticate.
type hostFilter struct {
	// anyHost accepts every host: the server authenticates and no AcceptHosts were
	// given.
	anyHost bool
	// patterns are Options.AcceptHosts, compiled to match whole host names.
	patterns []*regexp.Regexp
}

// newHostFilter returns the filter of opts, whose AcceptHosts are valid.
func newHostFilter(opts Options) *hostFilter {
	f := &hostFilter{anyHost: len(opts.AcceptHosts) == 0 && (opts.TokenFile != "" || opts.Delegated != nil)}
	for _, p := range opts.AcceptHosts {
		re, _ := compileHostPattern(p)
		f.patterns = append(f.patterns, re)
	}
	return f
}

// ValidateHostPattern checks a pattern of Options.AcceptHosts: a regular expression in
// RE2 syntax (regexp.Compile), matched against whole host names.
func ValidateHostPattern(pattern string) error {
	_, err := compileHostPattern(pattern)
	return err
}

// compileHostPattern compiles pattern to match whole host names: unlike kubectl proxy,
// which matches anywhere in the name, "fleetwatch\.example\.com" does not accept
// "fleetwatch.example.com.attacker.example".
func compileHostPattern(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, fmt.Errorf("empty pattern")
	}
	// Compiled alone first, so that "a)|(b" is an error rather than another pattern.
	if _, err := regexp.Compile(pattern); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + pattern + `)$`)
}

// hostName returns the host name of a Host header, in lower case, without its port and,
// for an IPv6 address, without its brackets: "LocalHost:8080" is "localhost" and
// "[::1]:8080" is "::1".
func hostName(header string) string {
	host := header
	if h, _, err := net.SplitHostPort(header); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	return strings.ToLower(host)
}

// isLoopbackName reports whether host, as hostName returns it, names the loopback
// interface: localhost (also written as the absolute "localhost."), 127.0.0.0/8 or ::1.
func isLoopbackName(host string) bool {
	if host == "localhost" || host == "localhost." {
		return true
	}
	host, _, _ = strings.Cut(host, "%") // an IPv6 zone
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// accepts reports whether the server answers a request with the Host header host. A
// request without one (HTTP/1.0, or made in-process) is accepted: browsers always send
// it.
func (f *hostFilter) accepts(header string) bool {
	if f.anyHost || header == "" {
		return true
	}
	host := hostName(header)
	if isLoopbackName(host) {
		return true
	}
	for _, re := range f.patterns {
		if re.MatchString(host) {
			return true
		}
	}
	return false
}

// checkHost answers 403 to a request for a host that the server does not accept, before
// anything else sees it, the probes included.
func (s *Server) checkHost(next http.Handler) http.Handler {
	if s.hosts.anyHost {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hosts.accepts(r.Host) {
			writeStatus(w, r, apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf(
				"host %q is not accepted: the server answers only for loopback names and the hosts it is configured to accept", hostName(r.Host))))
			return
		}
		next.ServeHTTP(w, r)
	})
}
