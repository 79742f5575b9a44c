package server

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// browserAccept is what Chromium sends with a navigation.
const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8"

func TestPrefersHTML(t *testing.T) {
	for _, tc := range []struct {
		accept string
		want   bool
	}{
		{browserAccept, true},
		{"text/html", true},
		{"text/html, */*", true},
		{"text/html;q=0.9, application/json;q=0.5", true},
		{"", false},
		{"*/*", false},
		{"application/json", false},
		{"application/json, text/html", false},
		{"application/json;q=0.9, text/html;q=0.9", false},
		{"text/html;q=0.5, */*", false},
		{"text/html;q=0", false},
		{"application/json;as=Table;v=v1;g=meta.k8s.io, application/json", false},
		{"text/html;q=bad", false},
	} {
		if got := prefersHTML(tc.accept); got != tc.want {
			t.Errorf("prefersHTML(%q) = %v, want %v", tc.accept, got, tc.want)
		}
	}
}

// checkPageHeaders checks the security headers of the page and its assets.
func checkPageHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	csp := h.Get("Content-Security-Policy")
	for _, d := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "require-trusted-types-for 'script'"} {
		if !strings.Contains(csp, d) {
			t.Errorf("%s: Content-Security-Policy %q lacks %q", what, csp, d)
		}
	}
	if strings.Contains(csp, "unsafe") || strings.Contains(csp, "*") || strings.Contains(csp, "http") {
		t.Errorf("%s: Content-Security-Policy %q allows more than 'self'", what, csp)
	}
	for k, v := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"} {
		if got := h.Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
	}
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "access-control-") {
			t.Errorf("%s: CORS header %s", what, k)
		}
	}
}

func TestPage(t *testing.T) {
	tokens := writeFile(t, t.TempDir(), "tokens", "s3cret user=admin\nprod-only user=p clusters=prod\n")
	for _, tc := range []struct {
		name string
		opts func(*Options)
	}{
		{"no auth", nil},
		{"token file", func(o *Options) { o.TokenFile = tokens }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts)
			auth := tc.opts != nil

			// Browsers get the page, without a token.
			r := f.get("/?view=search&q=web", "Accept", browserAccept, "Origin", "https://attacker.example")
			if r.code != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
				t.Fatalf("GET / as a browser: %d %s", r.code, r.header.Get("Content-Type"))
			}
			checkPageHeaders(t, "/", r.header)
			if !strings.Contains(r.header.Get("Vary"), "Accept") {
				t.Errorf("GET /: Vary %q lacks Accept", r.header.Get("Vary"))
			}
			page := string(r.body)

			// Every asset the page names, and every module those import, is served with
			// the same headers; none is fetched from elsewhere.
			refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(page, -1)
			seen := map[string]bool{}
			var queue []string
			for _, m := range refs {
				if strings.HasPrefix(m[1], uiPrefix) {
					queue = append(queue, m[1])
				}
			}
			imports := regexp.MustCompile(`from '\./([a-z]+\.js)'`)
			for len(queue) > 0 {
				p := queue[0]
				queue = queue[1:]
				if seen[p] {
					continue
				}
				seen[p] = true
				r := f.get(p)
				if r.code != http.StatusOK {
					t.Errorf("GET %s: %d", p, r.code)
					continue
				}
				checkPageHeaders(t, p, r.header)
				if strings.HasSuffix(p, ".js") {
					if ct := r.header.Get("Content-Type"); ct != "text/javascript; charset=utf-8" {
						t.Errorf("GET %s: Content-Type %q", p, ct)
					}
					for _, m := range imports.FindAllStringSubmatch(string(r.body), -1) {
						queue = append(queue, uiPrefix+m[1])
					}
				}
				body := strings.ReplaceAll(string(r.body), `xmlns="http://www.w3.org/2000/svg"`, "")
				if regexp.MustCompile(`(?i:https?:|wss?:)|//[a-z0-9.-]+\.[a-z]{2,}/|@import|\burl\(`).MatchString(body) {
					t.Errorf("%s refers to another server", p)
				}
				if regexp.MustCompile(`\.innerHTML\s*=|outerHTML\s*=|insertAdjacentHTML|document\.write|eval\(|new Function`).Match(r.body) {
					t.Errorf("%s writes HTML or code from strings", p)
				}
			}
			for _, want := range []string{"/ui/app.js", "/ui/style.css", "/ui/fleet.js", "/ui/object.js", "/ui/search.js"} {
				if !seen[want] {
					t.Errorf("the page does not load %s (loaded %v)", want, slices.Sorted(func(yield func(string) bool) {
						for k := range seen {
							if !yield(k) {
								return
							}
						}
					}))
				}
			}
			if regexp.MustCompile(`<script>|<style|\son[a-z]+=|style=`).MatchString(page) {
				t.Errorf("the page has inline script or style:\n%s", page)
			}

			// An unchanged asset is not sent again.
			r = f.get("/ui/app.js")
			if r2 := f.get("/ui/app.js", "If-None-Match", r.header.Get("ETag")); r2.code != http.StatusNotModified {
				t.Errorf("GET /ui/app.js with its ETag: %d, want 304", r2.code)
			}
			if r := f.do(http.MethodHead, "/ui/app.js"); r.code != http.StatusOK || len(r.body) != 0 {
				t.Errorf("HEAD /ui/app.js: %d, %d bytes", r.code, len(r.body))
			}
			for _, p := range []string{"/ui/", "/ui/index.html", "/ui/missing.js", "/ui/../server.go", "/ui/%2e%2e/page.go"} {
				if r := f.get(p); r.code != http.StatusNotFound {
					t.Errorf("GET %s: %d, want 404", p, r.code)
				}
			}
			r = f.do(http.MethodPost, "/ui/app.js")
			if auth {
				r.status(t, http.StatusUnauthorized)
			} else {
				r.status(t, http.StatusMethodNotAllowed)
			}

			// API clients that GET / keep the list of paths; they need a token as before.
			for _, accept := range []string{"", "*/*", "application/json", "application/json, text/html"} {
				r := f.get("/", "Accept", accept)
				if auth {
					r.status(t, http.StatusUnauthorized)
					r = f.get("/", "Accept", accept, "Authorization", "Bearer s3cret")
				}
				var paths struct{ Paths []string }
				if r.code != http.StatusOK || json.Unmarshal(r.body, &paths) != nil || !slices.Contains(paths.Paths, "/healthz") {
					t.Errorf("GET / with Accept %q: %d %s", accept, r.code, r.body)
				}
			}
			// The page gives no access to the API.
			if auth {
				f.get("/apis/fleetwatch.io/v1alpha1/clusters", "Accept", browserAccept).status(t, http.StatusUnauthorized)
				var list ClusterList
				f.getOK("/apis/fleetwatch.io/v1alpha1/clusters", &list, "Authorization", "Bearer prod-only")
				if len(list.Items) != 1 || list.Items[0].Name != prod {
					t.Errorf("a token of prod reads clusters %v", list.Items)
				}
			}
		})
	}
}

// TestPageHostCheck: a page on another origin that has its name resolve to loopback
// (DNS rebinding) gets neither the page nor its assets from a server without
// authentication.
func TestPageHostCheck(t *testing.T) {
	f := newFixture(t, nil)
	for _, p := range []string{"/", "/ui/app.js"} {
		req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, f.http.URL+p, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "attacker.example:8080"
		req.Header.Set("Accept", browserAccept)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s for host attacker.example: %d, want 403", p, res.StatusCode)
		}
	}
}
