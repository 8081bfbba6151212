package nodeactor

// queue is one of a lane's FIFOs of requests, in a ring buffer. A burst
// queued faster than the lane takes it (100,000 leases' renewals) grows it
// by doubling, each request copied about once; the slice it replaced
// (append at the tail, re-slice at the head) lost the room its head freed,
// so each growth copied the whole queue again: 6 % of the client's CPU in
// issue 28's burst.
type queue struct {
	buf  []Request
	head int // index in buf of the oldest request
	n    int // requests queued
}

func (q *queue) len() int { return q.n }

func (q *queue) push(r Request) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.n)%len(q.buf)] = r
	q.n++
}

func (q *queue) grow() {
	nb := make([]Request, max(16, 2*len(q.buf)))
	k := copy(nb, q.buf[q.head:min(q.head+q.n, len(q.buf))])
	copy(nb[k:], q.buf[:q.n-k])
	q.buf, q.head = nb, 0
}

// take moves requests from the head of q into batch until batch holds max
// requests or q is empty, and returns batch. An emptied queue larger than
// keep lets its array go (a burst's).
func (q *queue) take(batch []Request, max, keep int) []Request {
	for len(batch) < max && q.n > 0 {
		batch = append(batch, q.buf[q.head])
		q.buf[q.head] = Request{} // drop the references
		q.head = (q.head + 1) % len(q.buf)
		q.n--
	}
	if q.n == 0 {
		q.head = 0
		if len(q.buf) > keep {
			q.buf = nil
		}
	}
	return batch
}
