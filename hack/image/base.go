package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The user the image runs as, distroless's nonroot: deploy/'s securityContext runs the
// pod as this user and group.
const (
	nonrootID   = 65532
	nonrootHome = "/home/nonroot"
)

// CABundle is where the base puts the CA roots, where Go's crypto/x509 and most TLS
// stacks of Linux look first (Debian's path); SSL_CERT_FILE names it too.
const CABundle = "/etc/ssl/certs/ca-certificates.crt"

// entry is a file or directory of a layer: an absolute path, its mode and owner, and
// for a file its contents.
type entry struct {
	path string
	mode int64
	dir  bool
	uid  int
	data []byte
}

// baseEntries are the files of distroless static's nonroot image that a static binary
// uses: the users (root, nobody, nonroot), nsswitch.conf (hosts from /etc/hosts, then
// DNS, as Go's resolver reads it), the CA roots, /tmp and nonroot's home. Nothing that
// runs: no shell, no package manager, no libc.
func baseEntries() ([]entry, error) {
	roots, err := caBundle()
	if err != nil {
		return nil, err
	}
	return []entry{
		{path: "/etc", mode: 0o755, dir: true},
		{path: "/etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnobody:x:65534:\nnonroot:x:%d:\n", nonrootID))},
		{path: "/etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{path: "/etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf(
			"root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n",
			nonrootID, nonrootID, nonrootHome))},
		{path: "/etc/ssl", mode: 0o755, dir: true},
		{path: "/etc/ssl/certs", mode: 0o755, dir: true},
		{path: CABundle, mode: 0o644, data: roots},
		{path: "/home", mode: 0o755, dir: true},
		{path: nonrootHome, mode: 0o700, dir: true, uid: nonrootID},
		{path: "/tmp", mode: 0o1777, dir: true},
		{path: "/usr", mode: 0o755, dir: true},
		{path: "/usr/local", mode: 0o755, dir: true},
		{path: "/usr/local/bin", mode: 0o755, dir: true},
	}, nil
}

// caBundle is the PEM of the Mozilla (NSS) roots that golang.org/x/crypto/x509roots/fallback
// carries, at the version of this module's go.mod, so that the same commit gives the same
// bundle. A root that NSS distrusts after a date is left out: a PEM file cannot say so,
// and would trust what the root issues after it.
func caBundle() ([]byte, error) {
	var b bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if _, err := x509.ParseCertificate(root.Certificate); err != nil {
			return nil, fmt.Errorf("a root of the fallback bundle: %w", err)
		}
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("the fallback bundle has no unconstrained root")
	}
	return b.Bytes(), nil
}

// layerTar is the uncompressed tar of entries, in their order, every one dated mtime and
// owned by uid (0 unless the entry says) and its group of the same number, so that the
// same entries make the same bytes.
func layerTar(entries []entry, mtime time.Time) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.path[1:],
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.uid,
			ModTime: mtime,
		}
		if e.dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
