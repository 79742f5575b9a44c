package server

import (
	"crypto/x509"
	"strings"
	"testing"

	"k8s.io/klog/v2/textlogger"

	"github.com/fleetwatch/fleetwatch/internal/testcert"
)

// TestTokenFileReload: a request reads the tokens last loaded, and does not look at the
// file; reload applies a change, and a file that cannot be read accepts no token until
// it can.
func TestTokenFileReload(t *testing.T) {
	var log syncBuffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&log)))
	dir := t.TempDir()
	path := writeFile(t, dir, "tokens", "old-s3cret\n")
	tf, err := loadTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, writeFile(t, t.TempDir(), "new", "new-s3cret user=ci\n"), path)
	if tf.authenticate("old-s3cret") == nil {
		t.Fatal("a request read the token file")
	}
	for _, tc := range []struct {
		name       string
		change     func()
		old, new   bool
		wantLogged string
	}{
		{"changed", func() {}, false, true, "Token file changed; tokens reloaded"},
		{"unchanged", func() {}, false, true, ""},
		{"does not parse", func() { replaceFile(t, writeFile(t, t.TempDir(), "bad", "new-s3cret role=admin\n"), path) }, false, false, "Cannot read the token file"},
		{"still does not parse: logged once", func() {}, false, false, ""},
		{"written again", func() { writeFile(t, dir, "tokens", "old-s3cret\n") }, true, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.change()
			before := len(log.String())
			tf.reload(logger)
			if got := tf.authenticate("old-s3cret") != nil; got != tc.old {
				t.Errorf("old token accepted: %v, want %v", got, tc.old)
			}
			if got := tf.authenticate("new-s3cret") != nil; got != tc.new {
				t.Errorf("new token accepted: %v, want %v", got, tc.new)
			}
			logged := log.String()[before:]
			if tc.wantLogged == "" && logged != "" || !strings.Contains(logged, tc.wantLogged) {
				t.Errorf("logged %q, want %q", logged, tc.wantLogged)
			}
			if strings.Contains(logged, "s3cret") {
				t.Errorf("the log shows a token: %s", logged)
			}
		})
	}
}

// TestCertificatesReload: a rotation half done serves the certificate loaded before,
// and logs why once; the finished rotation serves the new one.
func TestCertificatesReload(t *testing.T) {
	var log syncBuffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&log)))
	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, "first")
	c, err := loadCertificates(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	served := func() string {
		t.Helper()
		tc, _ := c.get(nil)
		x, err := x509.ParseCertificate(tc.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return x.Subject.CommonName
	}
	newCert, newKey := testcert.Write(t, t.TempDir(), "second")
	replaceFile(t, newCert, cert)
	for range 2 {
		c.reload(logger)
		if cn := served(); cn != "first" {
			t.Fatalf("with the new certificate and the old key: %s", cn)
		}
	}
	if n := strings.Count(log.String(), "Cannot reload the TLS certificate"); n != 1 {
		t.Errorf("the failure was logged %d times, want once:\n%s", n, log.String())
	}
	replaceFile(t, newKey, key)
	c.reload(logger)
	if cn := served(); cn != "second" {
		t.Errorf("after the rotation: %s", cn)
	}
	if !strings.Contains(log.String(), "TLS certificate changed") {
		t.Errorf("the reload was not logged:\n%s", log.String())
	}
}
