package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

func TestHostFilter(t *testing.T) {
	tokens := writeFile(t, t.TempDir(), "tokens", "s3cret\n")
	accepted := []string{`fleetwatch\.example\.com`, `.*\.fleetwatch\.svc`}
	filters := map[string]Options{
		"no auth":                   {},
		"no auth, accepted hosts":   {AcceptHosts: accepted},
		"token file":                {TokenFile: tokens},
		"delegated":                 {Delegated: &DelegatedAuth{Config: &rest.Config{}}},
		"token file, accepted host": {TokenFile: tokens, AcceptHosts: accepted},
	}
	// want lists the filters that accept the host.
	for _, tc := range []struct {
		host string
		want []string
	}{
		{"localhost:8080", []string{"no auth", "no auth, accepted hosts", "token file", "delegated", "token file, accepted host"}},
		{"LocalHost", []string{"no auth", "no auth, accepted hosts", "token file", "delegated", "token file, accepted host"}},
		{"localhost.:8080", []string{"no auth", "no auth, accepted hosts", "token file", "delegated", "token file, accepted host"}},
		{"127.0.0.1:8080", []string{"no auth", "no auth, accepted hosts", "token file", "delegated", "token file, accepted host"}},
		{"127.1.2.3", []string{"no auth", "no auth, accepted hosts", "token file", "delegated", "token file, accepted host"}},
		{"[::1]:8080", []string{"no auth", "no auth, accepted hosts", "token file", "delegated", "token file, accepted host"}},
		{"[::1]", []string{"no auth", "no auth, accepted hosts", "token file", "delegated", "token file, accepted host"}},
		{"", []string{"no auth", "no auth, accepted hosts", "token file", "delegated", "token file, accepted host"}},
		{"attacker.example:8080", []string{"token file", "delegated"}},
		{"localhost.attacker.example", []string{"token file", "delegated"}},
		{"127.0.0.1.nip.io:8080", []string{"token file", "delegated"}},
		{"128.0.0.1", []string{"token file", "delegated"}},
		{"[::2]:80", []string{"token file", "delegated"}},
		{"fleetwatch.example.com:8443", []string{"no auth, accepted hosts", "token file", "delegated", "token file, accepted host"}},
		{"FleetWatch.Example.Com", []string{"no auth, accepted hosts", "token file", "delegated", "token file, accepted host"}},
		{"fleetwatch.example.com.attacker.example", []string{"token file", "delegated"}},
		{"xfleetwatch.example.com", []string{"token file", "delegated"}},
		{"api.fleetwatch.svc:8443", []string{"no auth, accepted hosts", "token file", "delegated", "token file, accepted host"}},
	} {
		for name, opts := range filters {
			want := false
			for _, w := range tc.want {
				want = want || w == name
			}
			if got := newHostFilter(opts).accepts(tc.host); got != want {
				t.Errorf("%s: accepts(%q) = %v, want %v", name, tc.host, got, want)
			}
		}
	}
}

// rawRequest sends a request over a new TCP connection to addr, written as it is, and
// returns the response.
func rawRequest(t *testing.T, addr, request string) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", request, err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// TestHostCheck sends raw HTTP requests, such as a browser's under DNS rebinding, to the
// server's handler chain over TCP: hosts other than loopback and the accepted ones get a
// 403 Status, on every path, and nothing answers with CORS headers.
func TestHostCheck(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.AcceptHosts = []string{`fleetwatch\.example\.com`} })
	addr := strings.TrimPrefix(f.http.URL, "http://")
	_, port, _ := net.SplitHostPort(addr)
	pods := clusterPath(prod) + "/api/v1/pods"
	for _, tc := range []struct {
		host, path string
		code       int
	}{
		{"attacker.example:" + port, pods, http.StatusForbidden},
		{"attacker.example:" + port, "/apis/fleetwatch.io/v1alpha1/clusters", http.StatusForbidden},
		{"attacker.example:" + port, "/readyz?verbose", http.StatusForbidden},
		{"attacker.example:" + port, "/healthz", http.StatusForbidden},
		{"localhost.attacker.example", pods, http.StatusForbidden},
		{"localhost:" + port, pods, http.StatusOK},
		{"127.0.0.1:" + port, pods, http.StatusOK},
		{"[::1]:" + port, "/healthz", http.StatusOK},
		{"fleetwatch.example.com", pods, http.StatusOK},
	} {
		t.Run(tc.host+tc.path, func(t *testing.T) {
			res := rawRequest(t, addr, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nOrigin: http://%[2]s\r\nConnection: close\r\n\r\n", tc.path, tc.host))
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.code {
				t.Fatalf("%d %s, want %d", res.StatusCode, body, tc.code)
			}
			checkNoCORS(t, res.Header)
			if tc.code != http.StatusForbidden {
				return
			}
			var st metav1.Status
			if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" || st.Reason != metav1.StatusReasonForbidden || st.Code != http.StatusForbidden {
				t.Errorf("not a Forbidden Status: %s", body)
			}
			if strings.Contains(string(body), "web-1") || strings.Contains(string(body), prod) {
				t.Errorf("the 403 shows the fleet: %s", body)
			}
		})
	}

	// A request line in absolute form carries the host too.
	res := rawRequest(t, addr, "GET http://attacker.example"+pods+" HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n")
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("absolute form: %d", res.StatusCode)
	}

	// A CORS preflight gets no Access-Control-* header, from any origin, for any host:
	// a browser then does not send the request.
	for _, host := range []string{"localhost:" + port, "attacker.example:" + port} {
		res := rawRequest(t, addr, fmt.Sprintf("OPTIONS %s HTTP/1.1\r\nHost: %s\r\nOrigin: http://attacker.example\r\n"+
			"Access-Control-Request-Method: GET\r\nAccess-Control-Request-Headers: authorization\r\nConnection: close\r\n\r\n", pods, host))
		if res.StatusCode < 400 {
			t.Errorf("preflight for %s: %d, want an error", host, res.StatusCode)
		}
		checkNoCORS(t, res.Header)
	}
}

func checkNoCORS(t *testing.T, h http.Header) {
	t.Helper()
	for name := range h {
		if strings.HasPrefix(strings.ToLower(name), "access-control-") {
			t.Errorf("CORS header %s: %s", name, h.Get(name))
		}
	}
}
