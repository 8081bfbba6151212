package primitives

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Holder metadata (docs/operations.md, "Who holds it"): a Lock, MultiLock,
// FairLock, RWLock and Semaphore hold carries a small description of its
// holder inside the values its script already writes, so that it costs no
// extra key and no extra command:
//
//	hold token  <token>~<label>~<host>~<pid>~<acquired ms>~<waiter>[~<traceparent>]
//	waiter id   <id>~<label>~<host>~<pid>            (Lock, Semaphore: the queue score is the waiting-since)
//	waiter id   <id>~<label>~<host>~<pid>~<ms>~      (FairLock, RWLock: <ms> is when the Acquire started)
//
// (the hold token is what follows "rl1:L:", "rl1:F:", "rl1:W:", "rl1:S:" in
// a key's value, or the member of an RWLock's readers or an owner's holds).

// <token> and <id> are 32 hex digits (a whole token is a capability and is
// never shown); <waiter> is the first 8 hex digits of the waiter id whose
// queue entry the hold keeps until its release ("" for TryAcquire), so a
// status can leave the holder out of the waiters. <traceparent> is the
// W3C trace context of a holder's acquire span, written only when
// Config.TracerProvider is set (docs/operations.md, "Traces"). The script treats the
// whole string as the token: it compares it whole (and never parses it),
// and so does a native SET … IFEQ renewal. CountDownLatch has no holder.

// MaxLabelLen bounds a label (WithLabel) and the host name recorded with a
// hold (longer host names are cut).
const MaxLabelLen = 64

// MaxStatusWaiters bounds the waiters a status reads per node.
const MaxStatusWaiters = 32

const metaSep = "~"

// WithLabel names the holder for operators: Lock.Status and `redlock
// status` show it with the host, pid and time of the acquisition
// ("held by worker-7 on host-a since 12:03:04"), and for a waiter, with the
// time it queued. 1..MaxLabelLen bytes of printable ASCII without spaces
// and '~'. Lock, MultiLock, FairLock, RWLock and Semaphore take it;
// CountDownLatch (which has no holder) rejects it with ErrInvalidArgument.
// Without it the label is empty and a status names the holder by its
// token's first 8 hex digits.
func WithLabel(label string) Option {
	return func(o *options) error {
		if err := validLabel(label); err != nil {
			return err
		}
		o.label = label
		return nil
	}
}

func validLabel(s string) error {
	if s == "" || len(s) > MaxLabelLen {
		return fmt.Errorf("%w: label must be 1..%d bytes, got %d", ErrInvalidArgument, MaxLabelLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '~' {
			return fmt.Errorf("%w: label %q: byte %d (%#x) is not printable ASCII, or is a space or '~'", ErrInvalidArgument, s, i, c)
		}
	}
	return nil
}

// holderMeta is the part of the metadata fixed per primitive: "~label~host~pid".
func holderMeta(label string) string {
	if label == "" {
		return unlabelledMeta() // built once: most primitives have no label
	}
	return metaSep + label + metaSep + hostLabel() + metaSep + strconv.Itoa(os.Getpid())
}

var unlabelledMeta = sync.OnceValue(func() string {
	return metaSep + metaSep + hostLabel() + metaSep + strconv.Itoa(os.Getpid())
})

var hostLabel = func() func() string {
	h, _ := os.Hostname()
	b := []byte(h)
	for i, c := range b {
		if c <= ' ' || c > '~' || c == '~' {
			b[i] = '_'
		}
	}
	if len(b) > MaxLabelLen {
		b = b[:MaxLabelLen]
	}
	s := string(b)
	return func() string { return s }
}()

// newToken returns 128 random bits from crypto/rand, hex encoded.
func newToken() string {
	var b [32]byte
	return string(appendToken(b[:0]))
}

// appendToken appends a fresh token (newToken's digits) to b.
func appendToken(b []byte) []byte {
	var r [16]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand doc)
	return hex.AppendEncode(b, r[:])
}

// holdValue is the token an attempt writes: a fresh token with the holder's
// metadata, the acquisition time and the waiter it queued as (wid, "" for none).
func holdValue(meta string, at time.Time, wid string) string {
	var buf [128]byte // one allocation: the string
	b := appendToken(buf[:0])
	b = append(b, meta...)
	b = append(b, metaSep...)
	b = strconv.AppendInt(b, at.UnixMilli(), 10)
	b = append(b, metaSep...)
	b = append(b, prefixN(wid, 8)...)
	return string(b)
}

// waiterID is a fresh waiter id carrying the metadata and the time its
// Acquire started, for the primitives whose queue score is not a time
// (FairLock: a ticket; RWLock readers: an expiry).
func waiterID(meta string) string {
	return newToken() + meta + metaSep + strconv.FormatInt(time.Now().UnixMilli(), 10) + metaSep
}

// bareToken is the 32 hex digits of a token with metadata.
func bareToken(tok string) string {
	t, _, _ := strings.Cut(tok, metaSep)
	return t
}

func prefixN(s string, n int) string {
	s = bareToken(s)
	if len(s) > n {
		return s[:n]
	}
	return s
}

// HolderInfo describes a holder or a waiter, as recorded with it.
type HolderInfo struct {
	ID    string    // the first 8 hex digits of the token or waiter id (a whole token is a capability); an owner's id in owner mode
	Label string    // WithLabel, "" if none was given
	Host  string    // the holder's host name (cut to MaxLabelLen)
	PID   int       // the holder's process id
	Since time.Time // a holder: when its attempt started (its own clock); a waiter: when it first queued (Lock, Semaphore, RWLock writers: the server's TIME; FairLock, RWLock readers: when its Acquire started, its own clock)

	waiter string  // a holder: the waiter id prefix whose entry it keeps
	trace  string  // a holder: the traceparent of its acquire span ("" if none)
	raw    string  // the whole value (a capability: never exported)
	rank   float64 // a waiter: its queue score on the nodes (they order by (score, id))
}

// String describes the holder: "worker-7 on host-a pid 12 since 12:03:04".
func (h HolderInfo) String() string {
	s := h.Name()
	if h.Host != "" {
		s += " on " + h.Host
	}
	if h.PID > 0 {
		s += " pid " + strconv.Itoa(h.PID)
	}
	if !h.Since.IsZero() {
		s += " since " + h.Since.Format("15:04:05")
	}
	return s
}

// Name is the label, or the ID when there is none.
func (h HolderInfo) Name() string {
	if h.Label != "" {
		return h.Label
	}
	return h.ID
}

// parseHolder reads "<hex>~label~host~pid[~ms~waiter]"; a value without
// metadata (an older client) gives the ID only.
func parseHolder(s string) HolderInfo {
	f := strings.Split(s, metaSep)
	h := HolderInfo{ID: prefix8(f[0]), raw: s}
	if len(f) >= 4 {
		h.Label, h.Host = f[1], f[2]
		h.PID, _ = strconv.Atoi(f[3])
	}
	if len(f) >= 6 {
		if ms, err := strconv.ParseInt(f[4], 10, 64); err == nil && ms > 0 {
			h.Since = time.UnixMilli(ms)
		}
		h.waiter = f[5]
		h.trace = traceField(f)
	}
	return h
}
