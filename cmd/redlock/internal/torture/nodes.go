package torture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

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
// always) on free loopback ports, each in dir/node<i>; with clock, each
// with the clock shim, so its wall clock can be stepped. It returns every
// node it started, also on error, so the caller kills them.
func startNodes(bin, dir string, count int, clock bool) ([]*node, error) {
	procs := make([]*redisproc.Process, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			procs[i], errs[i] = redisproc.Start(redisproc.Config{
				Bin:     bin,
				Dir:     filepath.Join(dir, "node"+strconv.Itoa(i)),
				Durable: true,
				Clock:   clock,
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

const (
	// cacheKeyPrefix names the cache keys an eviction fault writes.
	cacheKeyPrefix = "torture:cache:"
	// cacheValueSize is the size of one cache value.
	cacheValueSize = 64 << 10
	// evictHeadroom is how far above used_memory an eviction fault sets
	// maxmemory.
	evictHeadroom = 1 << 20
	// evictMaxWrites bounds the cache keys one eviction fault writes
	// (32 MiB): with no eviction by then, the fault reports an error.
	evictMaxWrites = 512
	// adminTimeout bounds each command of a fault on a node.
	adminTimeout = 2 * time.Second
)

// evict makes the node evict keys as a cache would: it sets
// maxmemory-policy volatile-lru and a maxmemory evictHeadroom above
// used_memory, writes cache keys with a TTL (SET torture:cache:<n> <64 KiB>
// EX 600, the user's cache data) until INFO stats evicted_keys grew, and
// keeps that pressure for hold. volatile-lru evicts among every key with a
// TTL: cache keys, and lock keys, fence counters and the guard's horizon
// alike. Then it sets maxmemory 0 and noeviction back (also when
// something failed) and deletes the cache keys. It returns how many keys
// were evicted meanwhile, and how many of them were not cache keys (the
// evicted count less the cache keys that were gone).
func (n *node) evict(ctx context.Context, hold time.Duration) (evicted, others int64, err error) {
	before, err := n.infoInt("stats", "evicted_keys")
	if err != nil {
		return 0, 0, err
	}
	used, err := n.infoInt("memory", "used_memory")
	if err != nil {
		return 0, 0, err
	}
	written, err := n.pressure(ctx, used+evictHeadroom, before)
	if err == nil {
		sleepCtx(ctx, hold)
	}
	after, aerr := n.infoInt("stats", "evicted_keys")
	gone, rerr := n.restoreMemory(written)
	if err = errors.Join(err, rerr, aerr); aerr != nil || rerr != nil {
		return 0, 0, err
	}
	evicted = after - before
	return evicted, max(0, evicted-int64(gone)), err
}

// pressure sets the evicting policy and maxmemory, then writes cache keys
// until evicted_keys is above before. It returns how many it wrote.
func (n *node) pressure(ctx context.Context, maxmemory, before int64) (int, error) {
	if err := n.admin("CONFIG", "SET", "maxmemory-policy", "volatile-lru"); err != nil {
		return 0, err
	}
	if err := n.admin("CONFIG", "SET", "maxmemory", strconv.FormatInt(maxmemory, 10)); err != nil {
		return 0, err
	}
	value := strings.Repeat("c", cacheValueSize)
	written := 0
	for written < evictMaxWrites && ctx.Err() == nil {
		err := n.admin("SET", cacheKeyPrefix+strconv.Itoa(written), value, "EX", "600")
		written++
		if err != nil {
			return written, err
		}
		if written%4 != 0 {
			continue
		}
		now, err := n.infoInt("stats", "evicted_keys")
		if err != nil {
			return written, err
		}
		if now > before {
			return written, nil
		}
	}
	if ctx.Err() != nil {
		return written, nil // the run ended first
	}
	return written, fmt.Errorf("node %d: no key evicted after %d cache keys of %d KiB with maxmemory %d", n.idx, written, cacheValueSize>>10, maxmemory)
}

// restoreMemory sets maxmemory 0 and maxmemory-policy noeviction back and
// deletes the written cache keys, with a few retries. It returns how many
// of them were gone (evicted) before the DEL. A restart would reset the
// configuration too: it is not persisted.
func (n *node) restoreMemory(written int) (gone int, err error) {
	for attempt := range 5 {
		if attempt > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		if err = n.admin("CONFIG", "SET", "maxmemory", "0"); err != nil {
			continue
		}
		if err = n.admin("CONFIG", "SET", "maxmemory-policy", "noeviction"); err != nil {
			continue
		}
		gone = written
		for i := 0; i < written && err == nil; i += 64 {
			keys := []string{"DEL"}
			for j := i; j < min(i+64, written); j++ {
				keys = append(keys, cacheKeyPrefix+strconv.Itoa(j))
			}
			var deleted int64
			if deleted, err = n.adminInt(keys...); err == nil {
				gone -= int(deleted)
			}
		}
		if err == nil {
			return gone, nil
		}
	}
	return 0, fmt.Errorf("restore noeviction: %w", err)
}

// admin sends one command to the node on its own admin connection.
func (n *node) admin(args ...string) error {
	_, err := n.adminReply(args...)
	return err
}

// adminInt is admin for a command with an integer reply.
func (n *node) adminInt(args ...string) (int64, error) {
	r, err := n.adminReply(args...)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(r, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("node %d: %s: reply %q: %w", n.idx, args[0], r, err)
	}
	return v, nil
}

func (n *node) adminReply(args ...string) (string, error) {
	r, err := n.Do(adminTimeout, args...)
	if err != nil {
		shown := 2 // not a 64 KiB value
		if args[0] == "CONFIG" {
			shown = 3
		}
		return "", fmt.Errorf("node %d: %s: %w", n.idx, strings.Join(args[:min(len(args), shown)], " "), err)
	}
	return r, nil
}

// infoInt reads one integer field of an INFO section.
func (n *node) infoInt(section, field string) (int64, error) {
	info, err := n.Do(adminTimeout, "INFO", section)
	if err != nil {
		return 0, fmt.Errorf("node %d: INFO %s: %w", n.idx, section, err)
	}
	v, err := strconv.ParseInt(redisproc.InfoField(info, field), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("node %d: INFO %s: %s: %w", n.idx, section, field, err)
	}
	return v, nil
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
