package benchkit

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/rueidis"
)

// ---- plain floor: SET NX PX at a quorum, compare-and-delete ----

// The plain floor is the least any quorum lock can do. It fans `SET key
// token NX PX ttl` out to every node and decides as soon as a quorum
// granted, or can no longer grant. A release is a compare-and-delete,
// decided at a quorum too. No fence, no queue, no renewal, no validity
// check. Beside the script floor it shows what our script costs on its
// own, and how far any Redlock client on this machine can go.

// cadScript deletes the key only where it holds our token (Redis 7 has no
// native compare-and-delete).
var cadScript = rueidis.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

type plainClient struct {
	nodes []rueidis.Client
}

func newPlain(_ context.Context, addrs []string) (Client, error) {
	nodes, err := dialNodes(addrs)
	if err != nil {
		return nil, err
	}
	return &plainClient{nodes: nodes}, nil
}

// quorum runs op on every node at once. It returns true as soon as q of
// them answered ok, or false once that can no longer happen. The other
// replies are drained by their goroutines, and all is closed once every
// node answered.
func (p *plainClient) quorum(op func(c rueidis.Client) (bool, error)) (ok bool, all <-chan struct{}, err error) {
	n := len(p.nodes)
	q := n/2 + 1
	type res struct {
		ok  bool
		err error
	}
	ch := make(chan res, n)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range p.nodes {
		wg.Go(func() {
			ok, err := op(c)
			ch <- res{ok, err}
		})
	}
	go func() { wg.Wait(); close(done) }()
	granted, no := 0, 0
	var errs []error
	for range n {
		r := <-ch
		if r.ok {
			granted++
		} else {
			no++
			if r.err != nil {
				errs = append(errs, r.err)
			}
		}
		if granted >= q {
			return true, done, nil
		}
		if no > n-q {
			break
		}
	}
	return false, done, errors.Join(errs...)
}

func (p *plainClient) Acquire(ctx context.Context, key string) (Release, error) {
	k := "redlock:{" + key + "}:plain"
	tok := token()
	// The requests outlive a quorum decision: they must not be cut short by
	// the caller's ctx once decided (the lock holds every node).
	bg := context.WithoutCancel(ctx)
	var acquired <-chan struct{}
	rel := func(ctx context.Context) error {
		// A SET still in flight on a slow node would run after our
		// compare-and-delete and leave the key for its TTL. So send the
		// deletes once every SET was answered. A real client keeps this
		// order per connection; the floor has a goroutine per request.
		<-acquired
		_, _, err := p.quorum(func(c rueidis.Client) (bool, error) {
			err := cadScript.Exec(bg, c, []string{k}, []string{tok}).Error()
			return err == nil, err
		})
		return err
	}
	ok, all, err := p.quorum(func(c rueidis.Client) (bool, error) {
		err := c.Do(bg, c.B().Set().Key(k).Value(tok).Nx().PxMilliseconds(LockTTL.Milliseconds()).Build()).Error()
		if rueidis.IsRedisNil(err) {
			return false, nil
		}
		return err == nil, err
	})
	acquired = all
	if !ok {
		_ = rel(ctx)
		if err != nil {
			return nil, err
		}
		return nil, errFloorRefused
	}
	return rel, nil
}

func (p *plainClient) Close() {
	for _, c := range p.nodes {
		c.Close()
	}
}
