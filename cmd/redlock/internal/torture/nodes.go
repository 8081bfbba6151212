package torture

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/redlock-go/redlock/internal/redisproc"
)

// node is one durable redis-server process of the run.
type node struct {
	idx int
	*redisproc.Process
}

// signal sends sig to the node's process group.
func (n *node) signal(sig syscall.Signal) error {
	if err := n.Signal(sig); err != nil {
		return fmt.Errorf("node %d: %w", n.idx, err)
	}
	return nil
}

// startNodes starts count durable redis-servers (appendonly, appendfsync
// always) on free loopback ports, each in dir/node<i>. It returns every
// node it started, also on error, so the caller kills them.
func startNodes(bin, dir string, count int) ([]*node, error) {
	procs := make([]*redisproc.Process, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			procs[i], errs[i] = redisproc.Start(redisproc.Config{
				Bin:     bin,
				Dir:     filepath.Join(dir, "node"+strconv.Itoa(i)),
				Durable: true,
			})
		})
	}
	wg.Wait()
	var nodes []*node
	for i, p := range procs {
		if p != nil {
			nodes = append(nodes, &node{idx: i, Process: p})
		}
	}
	return nodes, errors.Join(errs...)
}

// dataRoot is where the nodes keep their AOF: /dev/shm when it is a
// writable tmpfs, else the system's temporary directory. tmpfs keeps the
// fsync stalls of a shared disk out of the run. Such a stall hits every
// node at once: a majority fault the schedule never intends. A kill -9 of
// a node still keeps its data there.
func dataRoot() string {
	const shm = "/dev/shm"
	if st, err := os.Stat(shm); err == nil && st.IsDir() {
		if f, err := os.CreateTemp(shm, "redlock-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return shm
		}
	}
	return os.TempDir()
}
