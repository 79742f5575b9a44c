package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/config"
	"github.com/fleetwatch/fleetwatch/server"
	"github.com/fleetwatch/fleetwatch/shard"
)

// stateFetcher fetches a moved cluster's state from its old owner, at its published
// address, with this replica's credential of the home cluster: its bearer token, which
// the old owner's delegated authentication reviews with the home cluster (a
// ServiceAccount token, read again at each fetch, since the kubelet rotates it).
type stateFetcher struct {
	client    *http.Client
	home      *rest.Config
	userAgent string
}

var (
	_ fleetwatch.StateFetcher      = (*stateFetcher)(nil)
	_ fleetwatch.StateAcknowledger = (*stateFetcher)(nil)
)

// handoverOptions returns the Manager's handover options: none unless the configuration
// has the warm handover (config.Config.WarmHandover) and a home cluster. Without, a
// replica would keep states that no one fetches, and wait for them as it stops.
func handoverOptions(ctx context.Context, cfg *config.Config, home *rest.Config) (fleetwatch.HandoverOptions, error) {
	on, lacking := cfg.WarmHandover()
	if lacking != nil {
		klog.FromContext(ctx).Info("Warm handover is off; a cluster that moves starts cold on its new owner", "lacking", lacking)
	}
	if !on || home == nil {
		return fleetwatch.HandoverOptions{}, nil
	}
	pool, err := peerRoots(cfg)
	if err != nil {
		return fleetwatch.HandoverOptions{}, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return fleetwatch.HandoverOptions{
		Fetcher: &stateFetcher{
			client:    &http.Client{Transport: transport, Timeout: cfg.Shard.HandoverTimeout},
			home:      home,
			userAgent: userAgent(cfg) + " (handover)",
		},
		Timeout: cfg.Shard.HandoverTimeout,
	}, nil
}

// peerRoots returns the CAs trusted for the peers' certificates: shard.peerCaFile, else
// the system's roots and the certificates of server.tls.certFile.
func peerRoots(cfg *config.Config) (*x509.CertPool, error) {
	if cfg.Shard.PeerCAFile != "" {
		pem, err := os.ReadFile(cfg.Shard.PeerCAFile)
		if err != nil {
			return nil, fmt.Errorf("shard.peerCaFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("shard.peerCaFile: no PEM certificate in %s", cfg.Shard.PeerCAFile)
		}
		return pool, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if cfg.Server.TLS.CertFile != "" {
		pem, err := os.ReadFile(cfg.Server.TLS.CertFile)
		if err != nil {
			return nil, fmt.Errorf("server.tls.certFile: %w", err)
		}
		pool.AppendCertsFromPEM(pem)
	}
	return pool, nil
}

// token returns the bearer token of the home credential.
func (f *stateFetcher) token() (string, error) {
	if f.home.BearerTokenFile != "" {
		b, err := os.ReadFile(f.home.BearerTokenFile)
		if err != nil {
			return "", fmt.Errorf("reading the home cluster's token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if f.home.BearerToken == "" {
		return "", errors.New("the home cluster's credential has no bearer token to present to the old owner")
	}
	return f.home.BearerToken, nil
}

// FetchState implements fleetwatch.StateFetcher. What another attempt may not meet is a
// *fleetwatch.TransientError: no connection, a reset, a 5xx or 429 (with its
// Retry-After), a stream cut short; a 401, 403 or 404, or a certificate not trusted,
// is final.
func (f *stateFetcher) FetchState(ctx context.Context, h shard.Handover) (io.ReadCloser, error) {
	resp, err := f.do(ctx, http.MethodGet, h)
	if err != nil {
		return nil, err
	}
	return &transientBody{ReadCloser: resp.Body}, nil
}

// AcknowledgeState implements fleetwatch.StateAcknowledger: a DELETE of the state, which
// the old owner forgets then.
func (f *stateFetcher) AcknowledgeState(ctx context.Context, h shard.Handover) error {
	resp, err := f.do(ctx, http.MethodDelete, h)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// do sends a request of method for h's state to its old owner, and returns the answer
// if it is 200.
func (f *stateFetcher) do(ctx context.Context, method string, h shard.Handover) (*http.Response, error) {
	if h.Address == "" {
		return nil, fmt.Errorf("replica %q publishes no address", h.From)
	}
	if !strings.HasPrefix(h.Address, "https://") {
		// The state holds whole objects, and the request a token: never in clear.
		return nil, fmt.Errorf("replica %q's address %q is not https", h.From, h.Address)
	}
	tok, err := f.token()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(h.Address, "/")+server.StatePath(h.Cluster), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("User-Agent", f.userAgent)
	resp, err := f.client.Do(req)
	if err != nil {
		var verify *tls.CertificateVerificationError
		if errors.As(err, &verify) || ctx.Err() != nil {
			return nil, err
		}
		return nil, &fleetwatch.TransientError{Err: err}
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	err = fmt.Errorf("replica %q answered %s: %s", h.From, resp.Status, strings.TrimSpace(string(b)))
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		return nil, &fleetwatch.TransientError{Err: err, RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	}
	return nil, err
}

// retryAfter parses a Retry-After of seconds, as kube-apiserver and fleetwatch send it;
// 0 if there is none, or it is a date.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// transientBody makes an error of reading a state's stream (a connection reset, a stream
// shorter than its Content-Length) transient: the old owner keeps the state until it is
// acknowledged, so another attempt can read it whole.
type transientBody struct {
	io.ReadCloser
}

func (b *transientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = &fleetwatch.TransientError{Err: fmt.Errorf("reading the state: %w", err)}
	}
	return n, err
}
