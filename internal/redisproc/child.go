package redisproc

import (
	"os/exec"
	"runtime"
	"syscall"
)

// StartChild starts cmd so that it dies with this process. On Linux the
// child gets SIGKILL when the parent dies, even without any cleanup (a go
// test timeout, a kill -9). Elsewhere the child may outlive a killed parent. The returned channel is closed once
// the child has exited and been reaped (cmd.Wait has returned).
//
// Linux sends that signal when the *thread* that forked the child exits.
// So cmd is started from a goroutine locked to its OS thread for the life
// of the child. The runtime then never hands that thread to a goroutine
// that locks it and exits.
func StartChild(cmd *exec.Cmd) (<-chan struct{}, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	setPdeathsig(cmd.SysProcAttr)
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(done)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		<-done
		return nil, err
	}
	return done, nil
}
