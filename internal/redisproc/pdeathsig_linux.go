//go:build linux

package redisproc

import "syscall"

// setPdeathsig asks Linux to SIGKILL the child when the thread that forked
// it exits (see [StartChild] for why that thread is kept).
func setPdeathsig(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
