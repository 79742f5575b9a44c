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
	docs  []*roaring.Bitmap
	// free are the ids of texts that no document has any more, to reuse.
	free []uint32
	// grams maps each trigram of a text to the ids of the texts that hold it.
	grams map[uint32]*roaring.Bitmap
}

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
			t.docs[id] = roaring.New()
		} else {
			id = uint32(len(t.texts))
			t.texts = append(t.texts, text)
			t.docs = append(t.docs, roaring.New())
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
	t.docs[id].Add(doc)
}

// remove records that doc no longer has text.
func (t *textIndex) remove(text string, doc uint32) {
	id, ok := t.ids[text]
	if !ok {
		return
	}
	d := t.docs[id]
	d.Remove(doc)
	if !d.IsEmpty() {
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
	t.docs[id] = nil
	t.free = append(t.free, id)
}

// match returns the documents with a text that contains term (or starts with it, for a
// prefix). term is lower case.
func (t *textIndex) match(term TextTerm) *roaring.Bitmap {
	ok := term.matches
	var found []*roaring.Bitmap
	if len(term.Value) < 3 {
		for id, s := range t.texts {
			if t.docs[id] != nil && ok(s) {
				found = append(found, t.docs[id])
			}
		}
		return union(found)
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
			found = append(found, t.docs[id])
		}
	}
	return union(found)
}

// union returns the union of sets. Many small sets (a substring that most names hold,
// each name the object of a few clusters) are gathered as numbers and added at once,
// which is much faster than a union of thousands of bitmaps.
func union(sets []*roaring.Bitmap) *roaring.Bitmap {
	if len(sets) < 64 {
		return roaring.FastOr(sets...)
	}
	var n uint64
	for _, b := range sets {
		n += b.GetCardinality()
	}
	ids := make([]uint32, 0, n)
	for _, b := range sets {
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
