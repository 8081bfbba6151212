// Package argerr holds the invalid-argument sentinel, so that packages
// that need nothing else of the engine (fencesql) raise the same value.
package argerr

import "errors"

// ErrInvalidArgument is wrapped by every error about bad input.
var ErrInvalidArgument = errors.New("redlock: invalid argument")
