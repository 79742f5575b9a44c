package server

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fleetwatch/fleetwatch/persist"
)

// blockingCodec is the snapshot's codec, whose decodes wait for release while block
// is set, after telling entered.
type blockingCodec struct {
	persist.Codec
	block   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (c *blockingCodec) Decode(data []byte) (runtime.Object, error) {
	c.wait()
	return c.Codec.Decode(data)
}

// DecodeShared is the one the server and the fleet decode with
// (aggregate.SharingDecoder).
func (c *blockingCodec) DecodeShared(data []byte) (runtime.Object, error) {
	c.wait()
	return c.Codec.DecodeShared(data)
}

// wait waits for release while block is set, after telling entered.
func (c *blockingCodec) wait() {
	if c.block.Load() {
		select {
		case c.entered <- struct{}{}:
		default:
		}
		<-c.release
	}
}

// TestFieldSelectorDecodesOutsideTheLock: a field selector that a compact object's
// summary cannot answer decodes the objects without holding the view's lock, so the
// fleet's events are applied meanwhile; and the list is the same.
func TestFieldSelectorDecodesOutsideTheLock(t *testing.T) {
	codec := &blockingCodec{entered: make(chan struct{}, 1), release: make(chan struct{})}
	f := newFixtureOf(t, codec, nil)
	codec.block.Store(true)
	released := false
	release := func() {
		if !released {
			released = true
			codec.block.Store(false)
			close(codec.release)
		}
	}
	defer release()

	done := make(chan response, 1)
	go func() { done <- f.get("/clusters/*/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1&limit=3") }()
	select {
	case <-codec.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the list decoded nothing")
	}
	locked := make(chan struct{})
	rc := f.server.cache.lookup(podsGVR)
	go func() {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		close(locked)
	}()
	select {
	case <-locked:
	case <-time.After(10 * time.Second):
		release()
		t.Fatal("the view's lock was held while the list decoded objects")
	}
	release()
	r := <-done
	if r.code != http.StatusOK {
		t.Fatalf("list: %d %s", r.code, r.body)
	}
	// The first three of the fixture's six pods (edge's name sorts first), and a
	// continue token.
	body := string(r.body)
	for _, want := range []string{`"name":"web-3"`, `"name":"web-1"`, `"name":"web-2"`, `"continue":"`} {
		if !strings.Contains(body, want) {
			t.Errorf("list lacks %s: %s", want, body)
		}
	}
	if strings.Contains(body, `"name":"dns-1"`) {
		t.Errorf("list has more than its limit: %s", body)
	}
}
