package search

import "errors"

// ErrBadQuery is wrapped by every error of Parse and Query.Add, each a *TermError that
// names the bad term.
var ErrBadQuery = errors.New("bad search query")
