package nodeactor

import (
	"crypto/sha1"
	"encoding/hex"
)

// Script is a Lua script run with EVALSHA, falling back to EVAL when the
// node answers NOSCRIPT (after a restart or SCRIPT FLUSH). It is immutable
// and safe for concurrent use.
type Script struct {
	Name string
	Body string
	SHA  string
}

// NewScript returns a Script whose SHA1 is computed from body.
func NewScript(name, body string) *Script {
	sum := sha1.Sum([]byte(body))
	return &Script{Name: name, Body: body, SHA: hex.EncodeToString(sum[:])}
}

// Call is one operation on a node: a script with its keys and arguments, or,
// when Script is nil, a raw command whose words are Args.
type Call struct {
	Script *Script
	Keys   []string
	Args   []string
}
