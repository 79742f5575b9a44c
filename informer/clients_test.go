package informer

import (
	"testing"

	"k8s.io/client-go/rest"
)

// TestClientsMadeWhenNeeded: a Set makes the pair of clients that an informer asks for,
// once, and no other; a metadata-only resource that is not partial gets client-go's
// metadata client, with or without managedFields.
func TestClientsMadeWhenNeeded(t *testing.T) {
	c := newClients(&rest.Config{Host: "https://127.0.0.1:6443"}, true)
	made := func() (dyn, partial, partialMetadata bool) {
		return c.dynamic.drop != nil, c.partial.drop != nil, c.partialMetadata.drop != nil
	}
	drop, md, err := c.of(false, true, false)
	if err != nil || drop == nil || md != nil {
		t.Fatalf("partial: %v, %v, %v", drop, md, err)
	}
	keep, _, _ := c.of(false, true, true)
	if keep == drop {
		t.Error("the partial client that keeps managedFields is the one that drops them")
	}
	if again, _, _ := c.of(false, true, false); again != drop {
		t.Error("a second informer of the same kind got another client")
	}
	if d, p, pm := made(); d || !p || pm {
		t.Errorf("made dynamic %v, partial %v, partial metadata %v; want the partial pair only", d, p, pm)
	}
	for _, keepManaged := range []bool{false, true} {
		dyn, md, err := c.of(true, false, keepManaged)
		if err != nil || dyn != nil || md == nil {
			t.Errorf("metadata-only, keepManagedFields %v: %v, %v, %v; want the metadata client", keepManaged, dyn, md, err)
		}
	}
	if d, _, pm := made(); d || pm {
		t.Error("the metadata client made a dynamic pair")
	}
	if dyn, _, _ := c.of(false, false, false); dyn == nil {
		t.Error("no dynamic client")
	}
	if dyn, md, _ := c.of(true, true, false); dyn == nil || md != nil {
		t.Error("no partial metadata client")
	}
	if d, p, pm := made(); !d || !p || !pm {
		t.Error("a pair asked for was not made")
	}
}
