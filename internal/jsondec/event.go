package jsondec

import "errors"

// errNotPlainEvent is returned by WatchEvent for valid input that it leaves to
// apimachinery.
var errNotPlainEvent = errors.New("jsondec: not a plain watch event")

// WatchEvent reads data, the JSON of one event of a watch stream, which the apiserver
// writes as {"type": TYPE, "object": OBJECT}. It returns the event's type and the JSON of
// its object, checked but not decoded, as a slice of data.
//
// It reads the event as apimachinery's JSON serializer decodes a metav1.WatchEvent
// (keys matched case-sensitively, escapes and invalid UTF-8 as encoding/json reads them),
// but only in its plain form: the two keys, each once, in either order, with a string
// type and an object that is not null. Anything else, valid or not, is an error, and is
// left to apimachinery, which also knows what to make of extra keys.
func (d *Decoder) WatchEvent(data []byte) (eventType string, object []byte, err error) {
	d.start(data)
	defer d.finish()
	d.space()
	if d.peek() != '{' {
		return "", nil, errNotPlainEvent
	}
	d.off++
	var sawType, sawObject bool
	start, end := 0, 0
	for {
		d.space()
		if d.peek() != '"' {
			return "", nil, d.unexpected("looking for beginning of object key string")
		}
		key, err := d.str()
		if err != nil {
			return "", nil, err
		}
		d.space()
		if d.peek() != ':' {
			return "", nil, d.unexpected("after object key")
		}
		d.off++
		d.space()
		switch {
		case key == "type" && !sawType:
			sawType = true
			if d.peek() != '"' {
				return "", nil, errNotPlainEvent
			}
			s, err := d.str()
			if err != nil {
				return "", nil, err
			}
			eventType = d.Strings.Key(s)
		case key == "object" && !sawObject:
			sawObject = true
			if d.peek() == 'n' {
				return "", nil, errNotPlainEvent
			}
			start = d.off
			// The object is nested in the event: its maps and arrays are one level
			// deeper than on their own.
			if err := d.skip(1); err != nil {
				return "", nil, err
			}
			end = d.off
		default:
			return "", nil, errNotPlainEvent
		}
		if more, err := d.more('}'); err != nil {
			return "", nil, err
		} else if !more {
			break
		}
	}
	if err := d.end(); err != nil {
		return "", nil, err
	}
	if !sawType || !sawObject {
		return "", nil, errNotPlainEvent
	}
	return eventType, data[start:end:end], nil
}
