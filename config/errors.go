package config

import (
	"errors"
	"strconv"
	"strings"
)

var (
	// ErrInvalid is matched by every problem with the configuration that Load and
	// Validate report: errors.Is(err, ErrInvalid) tells a bad config from a file that
	// cannot be read. Each problem is a *FieldError that also matches one of the errors
	// below.
	ErrInvalid = errors.New("invalid config")

	// ErrSyntax means that the config file is not valid YAML, holds more than one
	// document, defines a key twice in one mapping, or expands to too many values
	// through aliases.
	ErrSyntax = errors.New("syntax error")

	// ErrUnknownKey means that the config file has a key that the schema does not
	// define.
	ErrUnknownKey = errors.New("unknown key")

	// ErrWrongType means that a value has the wrong type for its key, such as a string
	// for a number or a list for a string, or that an environment variable or flag
	// cannot be parsed as its key's type.
	ErrWrongType = errors.New("wrong type")

	// ErrInvalidValue means that a value has the right type but is not allowed, such as
	// a label selector that does not parse, or a non-loopback address without TLS.
	ErrInvalidValue = errors.New("invalid value")
)

// FieldError is one problem with the configuration. Load and Validate return all of
// them at once, joined with errors.Join.
type FieldError struct {
	// Key is the path of the key, such as "resources[2].labelSelector" or
	// `contexts.aliases["prod"]`; empty for a problem with the file as a whole.
	Key string

	// Where the bad value came from: File and Line (1-based, 0 if unknown) for the
	// config file, Env for an environment variable, Flag for a flag (without dashes).
	// All are empty for a value that was set in code or is a default.
	File string
	Line int
	Env  string
	Flag string

	// Err describes the problem; it does not repeat the key.
	Err error

	// kind is ErrSyntax, ErrUnknownKey, ErrWrongType or ErrInvalidValue.
	kind error
	// at is the key whose origin locates the problem, when it is not Key: a missing
	// key is located at the key that requires it.
	at string
}

// Error reads like "config.yaml:14: resources[2].labelSelector: <problem>".
func (e *FieldError) Error() string {
	var b strings.Builder
	switch {
	case e.File != "":
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	case e.Env != "":
		b.WriteString("env " + e.Env + ": ")
	case e.Flag != "":
		b.WriteString("flag --" + e.Flag + ": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalid or the kind of this problem.
func (e *FieldError) Is(target error) bool {
	return target == ErrInvalid || (target != nil && target == e.kind)
}

func newFieldError(kind error, key string, err error) *FieldError {
	return &FieldError{Key: key, Err: err, kind: kind}
}
