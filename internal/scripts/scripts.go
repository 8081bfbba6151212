// Package scripts lets the benchmark's floor send exactly the Lua script the
// library sends, without a copy: package primitives (which embeds its
// scripts, one per primitive) registers them here at init.
package scripts

import "sync"

var (
	mu  sync.RWMutex
	all = map[string]string{}
)

// Register records a script body under name; called from package primitives.
func Register(name, body string) {
	mu.Lock()
	defer mu.Unlock()
	all[name] = body
}

// Get returns the script registered under name ("" if none; import
// package primitives to have them registered).
func Get(name string) string {
	mu.RLock()
	defer mu.RUnlock()
	return all[name]
}
