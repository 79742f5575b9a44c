package wire

import (
	"bytes"
	"errors"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A watch stream is a sequence of JSON events, {"type": ..., "object": ...}. client-go
// splits it into frames with encoding/json's Decoder, then reads each frame's kind with
// encoding/json and decodes the envelope with sigs.k8s.io/json, leaving the object as raw
// bytes for the object decoder: the frame is scanned six times before the object is
// decoded. jsonFramer finds the end of each frame in one pass, and watchEventJSON reads
// the envelope in another, checking the object without decoding it.

// watchEventJSON is the stream serializer of the JSON media type. It decodes the plain
// envelopes of watch events with a jsondec.Decoder, and leaves everything else to
// Serializer, the dynamic client's own, which also encodes.
type watchEventJSON struct {
	runtime.Serializer
	pool decoderPool
	// kind is what Serializer returns as the kind of a watch event.
	kind *schema.GroupVersionKind
}

var _ runtime.Serializer = (*watchEventJSON)(nil)

func newWatchEventJSON(base runtime.Serializer, pool decoderPool) *watchEventJSON {
	s := &watchEventJSON{Serializer: base, pool: pool}
	// The kind of a plain event does not depend on the event: ask once.
	if _, kind, err := base.Decode([]byte(`{"type":"ADDED","object":{}}`), nil, &metav1.WatchEvent{}); err == nil && kind != nil {
		s.kind = kind
	}
	return s
}

func (s *watchEventJSON) Decode(data []byte, gvk *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if event, ok := into.(*metav1.WatchEvent); ok && gvk == nil && s.kind != nil {
		d := s.pool.get()
		eventType, object, err := d.WatchEvent(data)
		s.pool.put(d)
		if err == nil {
			event.Type = eventType
			// The frame's buffer is reused for the next frame.
			event.Object = runtime.RawExtension{Raw: bytes.Clone(object)}
			kind := *s.kind
			return event, &kind, nil
		}
	}
	return s.Serializer.Decode(data, gvk, into)
}

// jsonFramer splits a stream of JSON values into frames, one value each, as
// apimachinery's json.Framer does, without checking the values: the decoders that read
// the frames do. It writes frames with base.
type jsonFramer struct {
	base runtime.Framer
}

var _ runtime.Framer = jsonFramer{}

func (f jsonFramer) NewFrameReader(r io.ReadCloser) io.ReadCloser {
	return &jsonFrameReader{r: r}
}

func (f jsonFramer) NewFrameWriter(w io.Writer) io.Writer {
	return f.base.NewFrameWriter(w)
}

// jsonFrameReader returns one JSON value per Read, as the frame readers of package
// framer do: a value longer than the buffer is returned in parts, each but the last with
// io.ErrShortBuffer.
type jsonFrameReader struct {
	r io.ReadCloser
	// buf[start:end] is what was read from r and not returned yet.
	buf        []byte
	start, end int
	// err is the error that ended r.
	err error
	// remaining is the rest of a value that did not fit into the caller's buffer.
	remaining []byte
}

// frameReadSize is how much a jsonFrameReader asks its reader for at least.
const frameReadSize = 32 << 10

func (r *jsonFrameReader) Read(data []byte) (int, error) {
	if len(r.remaining) > 0 {
		n := copy(data, r.remaining)
		r.remaining = r.remaining[n:]
		if len(r.remaining) > 0 {
			return n, io.ErrShortBuffer
		}
		r.remaining = nil
		return n, nil
	}
	frame, err := r.next()
	if err != nil {
		return 0, err
	}
	n := copy(data, frame)
	if n < len(frame) {
		r.remaining = bytes.Clone(frame[n:])
		return n, io.ErrShortBuffer
	}
	return n, nil
}

func (r *jsonFrameReader) Close() error {
	return r.r.Close()
}

// next returns the next value, a slice of r.buf valid until the next call. At the end of
// the stream it returns io.EOF, or io.ErrUnexpectedEOF within a value.
func (r *jsonFrameReader) next() ([]byte, error) {
	// Leading white space.
	for {
		for r.start < r.end && isSpace(r.buf[r.start]) {
			r.start++
		}
		if r.start < r.end {
			break
		}
		if err := r.fill(); err != nil {
			return nil, err
		}
	}
	// The value: an object or an array ends at its closing bracket, a string at its
	// closing quote, a number at the first byte that cannot continue it, as in
	// encoding/json's scanner.
	var (
		i        = r.start
		depth    = 0
		inString = false
		escaped  = false
		num      numberState
	)
	switch c := r.buf[r.start]; {
	case c == '{' || c == '[':
	case c == '"':
		inString = true
		i++
	case c == '-' || '0' <= c && c <= '9':
		num = numStart
	case c == 't' || c == 'f' || c == 'n':
		return r.literal()
	default:
		// Not the beginning of a value: a frame of its own, for the decoder to reject.
		return r.take(r.start + 1), nil
	}
	for {
		for ; i < r.end; i++ {
			c := r.buf[i]
			switch {
			case escaped:
				escaped = false
			case inString:
				switch c {
				case '\\':
					escaped = true
				case '"':
					inString = false
					if depth == 0 {
						return r.take(i + 1), nil
					}
				}
			case num != 0:
				if num = num.next(c); num == 0 {
					return r.take(i), nil
				}
			default:
				switch c {
				case '"':
					inString = true
				case '{', '[':
					depth++
				case '}', ']':
					depth--
					if depth <= 0 {
						return r.take(i + 1), nil
					}
				}
			}
		}
		// i == r.end: read on, and go on from where the scan was.
		offset := i - r.start
		if err := r.fill(); err != nil {
			if errors.Is(err, io.EOF) {
				if num != 0 {
					return r.take(r.end), nil
				}
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		i = r.start + offset
	}
}

// literal returns the literal true, false or null at the start, or else its first byte,
// for the decoder to reject.
func (r *jsonFrameReader) literal() ([]byte, error) {
	for r.end-r.start < len("false") {
		if err := r.fill(); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
	}
	rest := r.buf[r.start:r.end]
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(rest, []byte(lit)) {
			return r.take(r.start + len(lit)), nil
		}
	}
	return r.take(r.start + 1), nil
}

// numberState is where in a JSON number a scan is; 0 is past its end.
type numberState uint8

const (
	numStart    numberState = iota + 1 // at the first byte
	numMinus                           // after a leading minus
	numZero                            // after a leading zero
	numInt                             // in the integer part
	numDot                             // after the decimal point
	numFrac                            // in the fraction
	numE                               // after the exponent's e
	numESign                           // after the exponent's sign
	numExponent                        // in the exponent
)

// next returns the state after c, or 0 if c does not continue the number. A number that
// ends where a digit is required is invalid, and its decoder rejects it.
func (s numberState) next(c byte) numberState {
	digit := '0' <= c && c <= '9'
	switch s {
	case numStart:
		switch {
		case c == '-':
			return numMinus
		case c == '0':
			return numZero
		case digit:
			return numInt
		}
	case numMinus:
		switch {
		case c == '0':
			return numZero
		case digit:
			return numInt
		}
	case numZero, numInt:
		switch {
		case digit && s == numInt:
			return numInt
		case c == '.':
			return numDot
		case c == 'e' || c == 'E':
			return numE
		}
	case numDot, numFrac:
		switch {
		case digit:
			return numFrac
		case (c == 'e' || c == 'E') && s == numFrac:
			return numE
		}
	case numE:
		switch {
		case c == '+' || c == '-':
			return numESign
		case digit:
			return numExponent
		}
	case numESign, numExponent:
		if digit {
			return numExponent
		}
	}
	return 0
}

// take returns buf[start:end] and moves start past it.
func (r *jsonFrameReader) take(end int) []byte {
	frame := r.buf[r.start:end]
	r.start = end
	return frame
}

// fill reads more into buf, after moving the unread bytes to its front and growing it if
// they fill it. It returns io.EOF once r has nothing more, or r's error.
func (r *jsonFrameReader) fill() error {
	if r.err != nil {
		return r.err
	}
	if r.start > 0 {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	if len(r.buf)-r.end < frameReadSize/2 {
		grown := make([]byte, max(2*len(r.buf), frameReadSize))
		copy(grown, r.buf[:r.end])
		r.buf = grown
	}
	n, err := r.r.Read(r.buf[r.end:])
	r.end += n
	if err != nil {
		r.err = err
		if n > 0 {
			return nil
		}
		return err
	}
	return nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}
