package search

import (
	"slices"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
)

// textIndex finds the documents whose text (a name, an image) contains a substring or
// starts with a prefix. It holds each distinct text once, with the set of documents that
// have it, and a trigram index over the distinct texts: a substring of three bytes or
// more is looked up as the intersection of its trigrams' sets, and each text found is
// checked; a shorter one is checked against every distinct text. Texts are lower case.
//
// It is not safe for concurrent use: the Index's lock guards it.
type textIndex struct {
	// ids maps each text to its id; texts, docs and free are by id.
	ids   map[string]uint32
	texts []string
	docs  []docSet
	// free are the ids of texts that no document has any more, to reuse.
	free []uint32
	// grams maps each trigram of a text to the ids of the texts that hold it.
	grams map[uint32]*roaring.Bitmap
}

// docSet is the set of documents that have one text, or one label value. Most names,
// and label values such as a StatefulSet pod's name, are one object's, so a single
// document is held inline, and a bitmap is made only for a second: a roaring.Bitmap of
// one number took about 150 bytes per distinct name, over a third of the index
// (docs/benchmarks.md, "What the daemon holds beyond the fleet").
type docSet struct {
	// many holds the documents when there are two or more; nil otherwise.
	many *roaring.Bitmap
	// one is the document when many is nil and has is set.
	one uint32
	has bool
}

func (d *docSet) add(doc uint32) {
	switch {
	case d.many != nil:
		d.many.Add(doc)
	case !d.has:
		d.one, d.has = doc, true
	case d.one != doc:
		d.many = roaring.BitmapOf(d.one, doc)
		d.one, d.has = 0, false
	}
}

// remove removes doc, and reports whether the set is empty then.
func (d *docSet) remove(doc uint32) (empty bool) {
	if d.many == nil {
		if d.has && d.one == doc {
			d.one, d.has = 0, false
		}
		return !d.has
	}
	d.many.Remove(doc)
	switch d.many.GetCardinality() {
	case 0:
		d.many = nil
		return true
	case 1:
		d.one, d.has = d.many.Minimum(), true
		d.many = nil
	}
	return false
}

// empty reports whether no document has the text (a free id).
func (d *docSet) empty() bool { return d.many == nil && !d.has }

func newTextIndex() *textIndex {
	return &textIndex{ids: make(map[string]uint32), grams: make(map[uint32]*roaring.Bitmap)}
}

// trigrams calls f with each distinct trigram of s, as a number.
func trigrams(s string, f func(g uint32)) {
	var seen map[uint32]bool
	if len(s) > 8 {
		seen = make(map[uint32]bool, len(s))
	}
	var prev []uint32
	for i := 0; i+3 <= len(s); i++ {
		g := uint32(s[i])<<16 | uint32(s[i+1])<<8 | uint32(s[i+2])
		if seen != nil {
			if seen[g] {
				continue
			}
			seen[g] = true
		} else {
			dup := false
			for _, p := range prev {
				if p == g {
					dup = true
					break
				}
			}
			if dup {
				continue
			}
			prev = append(prev, g)
		}
		f(g)
	}
}

// add records that doc has text.
func (t *textIndex) add(text string, doc uint32) {
	id, ok := t.ids[text]
	if !ok {
		if n := len(t.free); n > 0 {
			id = t.free[n-1]
			t.free = t.free[:n-1]
			t.texts[id] = text
		} else {
			id = uint32(len(t.texts))
			t.texts = append(t.texts, text)
			t.docs = append(t.docs, docSet{})
		}
		t.ids[text] = id
		trigrams(text, func(g uint32) {
			b := t.grams[g]
			if b == nil {
				b = roaring.New()
				t.grams[g] = b
			}
			b.Add(id)
		})
	}
	t.docs[id].add(doc)
}

// remove records that doc no longer has text.
func (t *textIndex) remove(text string, doc uint32) {
	id, ok := t.ids[text]
	if !ok {
		return
	}
	if !t.docs[id].remove(doc) {
		return
	}
	trigrams(text, func(g uint32) {
		if b := t.grams[g]; b != nil {
			b.Remove(id)
			if b.IsEmpty() {
				delete(t.grams, g)
			}
		}
	})
	delete(t.ids, text)
	t.texts[id] = ""
	t.free = append(t.free, id)
}

// match returns the documents with a text that contains term (or starts with it, for a
// prefix). term is lower case.
func (t *textIndex) match(term TextTerm) *roaring.Bitmap {
	ok := term.matches
	var found docsFound
	if len(term.Value) < 3 {
		for id, s := range t.texts {
			if !t.docs[id].empty() && ok(s) {
				found.add(&t.docs[id])
			}
		}
		return found.union()
	}
	var sets []*roaring.Bitmap
	missing := false
	trigrams(term.Value, func(g uint32) {
		b := t.grams[g]
		if b == nil {
			missing = true
			return
		}
		sets = append(sets, b)
	})
	if missing {
		return roaring.New()
	}
	candidates := roaring.FastAnd(sets...)
	it := candidates.Iterator()
	for it.HasNext() {
		id := it.Next()
		if ok(t.texts[id]) {
			found.add(&t.docs[id])
		}
	}
	return found.union()
}

// docsFound gathers document sets to unite.
type docsFound struct {
	// ones are the documents of the texts with one; sets those of the others.
	ones []uint32
	sets []*roaring.Bitmap
}

func (f *docsFound) add(d *docSet) {
	if d.many != nil {
		f.sets = append(f.sets, d.many)
	} else if d.has {
		f.ones = append(f.ones, d.one)
	}
}

// union returns the union of the sets found. Many small sets (a substring that most
// names hold, each name the object of one or a few clusters) are gathered as numbers
// and added at once, which is much faster than a union of thousands of bitmaps.
func (f *docsFound) union() *roaring.Bitmap {
	if len(f.sets) < 64 {
		out := roaring.FastOr(f.sets...)
		out.AddMany(slices.Sorted(slices.Values(f.ones)))
		return out
	}
	n := uint64(len(f.ones))
	for _, b := range f.sets {
		n += b.GetCardinality()
	}
	ids := make([]uint32, 0, n)
	ids = append(ids, f.ones...)
	for _, b := range f.sets {
		it := b.Iterator()
		for it.HasNext() {
			ids = append(ids, it.Next())
		}
	}
	slices.Sort(ids)
	out := roaring.New()
	out.AddMany(ids)
	return out
}

// lower returns s in lower case, without copying an ASCII string that has no upper
// case letter (most names).
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 || 'A' <= c && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}
