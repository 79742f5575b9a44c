package server

import (
	"crypto/tls"
	"errors"
	"os"
	"sync"

	"k8s.io/klog/v2"
)

// certificates holds the server's TLS certificate, read from files and read again when
// they change.
type certificates struct {
	certFile, keyFile string

	// reloadMu serializes reloads, and guards the fields below it.
	reloadMu sync.Mutex
	// certStat and keyStat identify the versions of the files that were loaded.
	certStat, keyStat os.FileInfo
	// lastErr is the error of the last reload that failed, so that each failure is
	// logged once; empty after a success.
	lastErr string

	// mu guards cert, which a reload replaces and never modifies.
	mu   sync.Mutex
	cert *tls.Certificate
}

// loadCertificates loads the certificate and key. It fails if they cannot be loaded, or
// do not belong together.
func loadCertificates(certFile, keyFile string) (*certificates, error) {
	c := &certificates{certFile: certFile, keyFile: keyFile}
	cs, ks, cert, err := c.load()
	if err != nil {
		return nil, err
	}
	c.certStat, c.keyStat, c.cert = cs, ks, cert
	return c, nil
}

// load reads both files, and returns what identifies their versions.
func (c *certificates) load() (certStat, keyStat os.FileInfo, cert *tls.Certificate, err error) {
	cs, err1 := os.Stat(c.certFile)
	ks, err2 := os.Stat(c.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, nil, err
	}
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, nil, nil, err
	}
	return cs, ks, &pair, nil
}

// reload loads the files again if either changed since they were loaded; the server's
// filewatch.Follower calls it when they may have changed. If they cannot be loaded (a
// rotation half done), the certificate loaded before is served, and the error logged
// once.
func (c *certificates) reload(logger klog.Logger) {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	cs, err1 := os.Stat(c.certFile)
	ks, err2 := os.Stat(c.keyFile)
	if err1 == nil && err2 == nil && sameFile(cs, c.certStat) && sameFile(ks, c.keyStat) {
		return
	}
	cs, ks, cert, err := c.load()
	if err != nil {
		if err.Error() != c.lastErr {
			c.lastErr = err.Error()
			logger.Error(err, "Cannot reload the TLS certificate; serving the one loaded before", "certFile", c.certFile, "keyFile", c.keyFile)
		}
		return
	}
	c.lastErr = ""
	c.certStat, c.keyStat = cs, ks
	c.mu.Lock()
	c.cert = cert
	c.mu.Unlock()
	logger.Info("TLS certificate changed; reloaded", "certFile", c.certFile, "keyFile", c.keyFile)
}

// get is tls.Config.GetCertificate: the certificate last loaded.
func (c *certificates) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cert, nil
}

// sameFile reports whether a and b describe the same version of a file.
func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}
