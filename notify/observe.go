package notify

// Observe registers an observer of topic: a Waiter outside the topic's
// FIFO. It is woken by every message of the topic, whoever it names, and
// whenever a push connection was re-established or a message was dropped.
// A node's confirmation of the subscription wakes it too: a message sent
// before it was lost. Its Ready closes like a waiter's.
// No named message is for it and no re-check is passed to it, so it never
// delays a waiter. Pass does nothing for it. It must be closed with Close.
func (r *Router) Observe(topic string) *Waiter {
	w := &Waiter{topics: []string{topic}, observer: true, c: make(chan struct{}, 1),
		ready: make(chan struct{}), r: r}
	r.send(ctl{join: w})
	return w
}

// tell wakes every observer of t.
func (r *Router) tell(t *topic) {
	for _, w := range t.observers {
		r.signal(w)
	}
}

// idle reports whether t has neither waiters nor observers.
func (t *topic) idle() bool { return len(t.waiters) == 0 && len(t.observers) == 0 }

// without returns ws without w (in place).
func without(ws []*Waiter, w *Waiter) []*Waiter {
	for i, x := range ws {
		if x == w {
			return append(ws[:i], ws[i+1:]...)
		}
	}
	return ws
}
