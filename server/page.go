package server

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The web page: plain HTML, CSS and ES modules written by hand, embedded in the binary,
// so that nothing is fetched from elsewhere and no build step is needed. It reads the
// same API as any client, with the same credentials (a bearer token the user types in),
// so it can show nothing that its user could not read with kubectl.
//
//go:embed ui
var uiFiles embed.FS

// uiPrefix is the path under which the page's assets are served.
const uiPrefix = "/ui/"

// pageHeaders are set on the page and every asset. The Content-Security-Policy allows
// scripts, styles, images and requests from the server itself only, no inline script or
// style, no string-to-DOM sinks (Trusted Types with no policy), and no framing;
// Referrer-Policy keeps the page's URL, which holds a search, from other servers.
var pageHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
		"base-uri 'none'; form-action 'self'; frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'",
	"X-Frame-Options":              "DENY",
	"X-Content-Type-Options":       "nosniff",
	"Referrer-Policy":              "no-referrer",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
	"Cache-Control":                "no-cache",
}

// asset is one embedded file of the page.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// pageAssets returns the embedded files by the path they are served at: index.html at /,
// the others under uiPrefix. They are read and digested at the first request for the
// page, not when the process starts (9 ms, on the path of every start to ready).
var pageAssets = sync.OnceValue(func() map[string]asset {
	assets := map[string]asset{}
	err := fs.WalkDir(uiFiles, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := uiFiles.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ct := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) { // not left to the system's MIME table
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".html":
			ct = "text/html; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		served := uiPrefix + strings.TrimPrefix(p, "ui/")
		if p == "ui/index.html" {
			served = "/"
		}
		assets[served] = asset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("server: reading the embedded page: " + err.Error())
	}
	return assets
})

// servePage serves the web page at / to browsers, and its assets under uiPrefix, to
// anyone: they hold no data, so they need no token (a browser cannot send one with a
// navigation), and they read nothing of the cache, so they take no place in the limits.
// The host check comes before it, so that a page on another origin cannot load them
// through DNS rebinding either. Every other request, and a GET / that prefers JSON (API
// clients, which get the list of paths), goes on to next.
func (s *Server) servePage(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		isPage := p == "/" && prefersHTML(r.Header.Get("Accept"))
		if !isPage && !strings.HasPrefix(p, uiPrefix) || r.Method != http.MethodGet && r.Method != http.MethodHead {
			if p == "/" {
				w.Header().Add("Vary", "Accept")
			}
			next.ServeHTTP(w, r)
			return
		}
		infoFrom(r.Context()).verb = "page"
		a, ok := pageAssets()[p]
		if p == "/" {
			w.Header().Add("Vary", "Accept")
		} else if p == uiPrefix+"index.html" {
			ok = false // served at / only
		}
		if !ok {
			writeStatus(w, r, notFoundPath(p))
			return
		}
		h := w.Header()
		for k, v := range pageHeaders {
			h.Set(k, v)
		}
		h.Set("Content-Type", a.contentType)
		h.Set("ETag", a.etag)
		// ServeContent answers If-None-Match with 304, and HEAD without a body.
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	})
}

// prefersHTML reports whether an Accept header prefers an HTML page to JSON, as a
// browser's navigation does ("text/html,...,*/*;q=0.8"). A client that names JSON at
// least as high as HTML, or accepts anything without naming HTML (curl's */*), gets
// JSON.
func prefersHTML(accept string) bool {
	var html, json, any float64
	for part := range strings.SplitSeq(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			if q, err = strconv.ParseFloat(v, 64); err != nil {
				continue
			}
		}
		switch mt {
		case "text/html":
			html = max(html, q)
		case contentTypeJSON:
			json = max(json, q)
		case "*/*", "application/*":
			any = max(any, q)
		}
	}
	return html > 0 && html > json && html >= any
}
