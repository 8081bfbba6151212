//go:build !linux

package redisproc

import "syscall"

// setPdeathsig does nothing: only Linux can kill a child when its parent
// dies. Elsewhere a server outlives a parent killed with SIGKILL (a parent
// that exits normally still kills what it started).
func setPdeathsig(*syscall.SysProcAttr) {}
