package coordinator

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/nodeactor"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// WaitStrategy selects how a blocked Acquire learns that it may retry.
type WaitStrategy int

const (
	WaitNotify  WaitStrategy = iota // default: push notifications + handoff + local TTL timer
	WaitPolling                     // exponential backoff with jitter only
)

// KeyspaceMode says whether New may turn on keyspace notifications.
type KeyspaceMode int

const (
	KeyspaceAuto KeyspaceMode = iota // default: merge Kgx into notify-keyspace-events if CONFIG allows; else carry on without
	KeyspaceOn                       // require keyspace events; New fails with a clear error if they cannot be enabled
	KeyspaceOff                      // never send CONFIG (least privilege)
)

// GuardMode says whether the node guard runs (docs/lock.md, "Node guard").
type GuardMode int

const (
	GuardAuto GuardMode = iota // default: hold a node that forgot out of every quorum until its leases expired
	GuardOff                   // never: a node restarted empty at once may let a second holder in
)

// Defaults for Config fields left zero.
const (
	DefaultKeyPrefix     = "redlock:"
	DefaultTTL           = 30 * time.Second
	DefaultDriftFactor   = 0.01
	DefaultRetryDelay    = 10 * time.Millisecond
	DefaultMaxRetryDelay = 500 * time.Millisecond
	MinTTL               = engine.MinTTL
	MaxTTL               = engine.MaxTTL
	MaxNameLen           = engine.MaxNameLen
	// MinNodeTimeout is the shortest NodeTimeout; it must also be below
	// DefaultTTL.
	MinNodeTimeout = time.Millisecond
)

// Config configures a Coordinator. The zero value of each field selects the
// documented default; Nodes is required.
type Config struct {
	Nodes []string // per independent master: "host:port" or a redis:// or rediss:// URL (user, password,
	// db; extra seeds with ?addr=host:port make that node a Redis Cluster); 1 = single node
	KeyPrefix     string        // "" means "redlock:"; must not contain '{' or '}'
	WaitStrategy  WaitStrategy  // how waiters learn of a release
	Keyspace      KeyspaceMode  // whether New may enable keyspace events
	DefaultTTL    time.Duration // 0 means 30s
	NodeTimeout   time.Duration // per-node reply timeout, in [1ms, DefaultTTL); 0 means max(50ms, DefaultTTL/100)
	DriftFactor   float64       // 0 means 0.01 (validity -= TTL*drift + 2ms)
	RetryDelay    time.Duration // backoff base; 0 means 10ms
	MaxRetryDelay time.Duration // backoff cap, at least RetryDelay; 0 means max(500ms, RetryDelay)
	Username      string        // default AUTH for nodes given as host:port; never logged
	Password      string        // never logged
	TLS           *tls.Config   // nil means plain TCP
	ForceLua      bool          // never use native CAS/CAD even where probed
	Logger        *slog.Logger  // nil means slog.Default()
	// MaxTTL is the longest TTL any client of these nodes uses; 0 means 24h.
	// A TTL above it is ErrInvalidArgument. It bounds the node guard: give
	// every process the same (the guard uses the largest it reads on the
	// nodes, and warns when that is not its own).
	MaxTTL    time.Duration
	NodeGuard GuardMode // GuardAuto (default) or GuardOff

	// StartTimeout bounds how long New waits for a quorum of nodes; 0 means 5s
	// (or the ctx deadline, if sooner). With the node guard on, New also arms
	// the nodes in that time; below about 2.5 s a slow or hung node can leave
	// the others to the guard loop's next tick, a second or so later.
	StartTimeout time.Duration
	// HandoffWindow is how long a release reserves the lock for the longest
	// waiter; 0 means max(100ms, NodeTimeout).
	HandoffWindow time.Duration
	// MeterProvider receives the metrics (OpenTelemetry metric API); nil
	// means no-op. See docs/operations.md.
	MeterProvider metric.MeterProvider
	// TracerProvider, if set, receives the spans redlock.acquire,
	// redlock.release and redlock.force_release (docs/operations.md,
	// "Traces"); nil means no spans. A holder's span context is stored with
	// its holder metadata, so a waiter's acquire span links to it.
	TracerProvider trace.TracerProvider
	// NameAttribute, if set, maps a resource name to its redlock.name span
	// attribute ("" leaves it out). Without it no span carries the name:
	// names that carry IDs would make every span unique.
	NameAttribute func(name string) string
	// ClientOption, if set, adjusts each node's rueidis options after they
	// were built from the address (advanced: dialers, buffer sizes).
	ClientOption func(node int, opt *rueidis.ClientOption)
}

type nodeSpec = engine.NodeSpec

func (cfg *Config) normalize() error {
	if len(cfg.Nodes) == 0 {
		return invalid("no nodes configured")
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}") {
		return invalid("KeyPrefix %q must not contain '{' or '}'", cfg.KeyPrefix)
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if cfg.MaxTTL < 0 || cfg.MaxTTL > MaxTTL {
		return invalid("MaxTTL %s out of range [0, %s]", cfg.MaxTTL, MaxTTL)
	}
	if cfg.MaxTTL == 0 {
		cfg.MaxTTL = MaxTTL
	}
	if cfg.NodeGuard != GuardAuto && cfg.NodeGuard != GuardOff {
		return invalid("unknown GuardMode %d", cfg.NodeGuard)
	}
	if cfg.DefaultTTL == 0 {
		cfg.DefaultTTL = DefaultTTL
	}
	if cfg.DefaultTTL > cfg.MaxTTL {
		return invalid("DefaultTTL %s exceeds MaxTTL %s", cfg.DefaultTTL, cfg.MaxTTL)
	}
	if err := ValidateTTL(cfg.DefaultTTL); err != nil {
		return err
	}
	if cfg.NodeTimeout < 0 || cfg.RetryDelay < 0 || cfg.MaxRetryDelay < 0 || cfg.StartTimeout < 0 || cfg.HandoffWindow < 0 {
		return invalid("durations must not be negative")
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = max(50*time.Millisecond, cfg.DefaultTTL/100)
	}
	if cfg.NodeTimeout < MinNodeTimeout || cfg.NodeTimeout >= cfg.DefaultTTL {
		return invalid("NodeTimeout %s out of range [%s, DefaultTTL %s)", cfg.NodeTimeout, MinNodeTimeout, cfg.DefaultTTL)
	}
	if !(cfg.DriftFactor >= 0 && cfg.DriftFactor < 0.5) { // also rejects NaN
		return invalid("DriftFactor %v out of range [0, 0.5)", cfg.DriftFactor)
	}
	if cfg.DriftFactor == 0 {
		cfg.DriftFactor = DefaultDriftFactor
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay = DefaultRetryDelay
	}
	if cfg.MaxRetryDelay == 0 {
		cfg.MaxRetryDelay = max(DefaultMaxRetryDelay, cfg.RetryDelay)
	}
	if cfg.MaxRetryDelay < cfg.RetryDelay {
		return invalid("RetryDelay %s exceeds MaxRetryDelay %s (the backoff starts at RetryDelay and is capped at MaxRetryDelay)",
			cfg.RetryDelay, cfg.MaxRetryDelay)
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 5 * time.Second
	}
	if cfg.HandoffWindow == 0 {
		cfg.HandoffWindow = max(100*time.Millisecond, cfg.NodeTimeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WaitStrategy != WaitNotify && cfg.WaitStrategy != WaitPolling {
		return invalid("unknown WaitStrategy %d", cfg.WaitStrategy)
	}
	if cfg.Keyspace < KeyspaceAuto || cfg.Keyspace > KeyspaceOff {
		return invalid("unknown KeyspaceMode %d", cfg.Keyspace)
	}
	return nil
}

// ValidateTTL checks a TTL against the documented bounds (100ms .. 24h).
func ValidateTTL(ttl time.Duration) error { return engine.ValidateTTL(ttl) }

// ValidateName checks a resource name: non-empty, at most MaxNameLen bytes,
// without '{' or '}' (they would break the hash tag that keeps a
// resource's keys in one cluster slot).
func ValidateName(name string) error { return engine.ValidateName(name) }

func (cfg *Config) parseNodes() ([]nodeSpec, error) {
	specs := make([]nodeSpec, 0, len(cfg.Nodes))
	seen := map[string]bool{}
	for i, n := range cfg.Nodes {
		n = strings.TrimSpace(n)
		if n == "" {
			return nil, invalid("node %d is empty", i)
		}
		var spec nodeSpec
		if strings.Contains(n, "://") {
			u, err := url.Parse(n)
			if err != nil {
				return nil, invalid("node %d: bad URL (%s)", i, redactURLError(err))
			}
			if err := checkURL(u); err != nil {
				return nil, invalid("node %d (%s): %s", i, redactURL(u), err)
			}
			opt, err := rueidis.ParseURL(n)
			if err != nil {
				return nil, invalid("node %d: %s", i, redactURLError(err))
			}
			spec.Client = opt
			spec.DB = opt.SelectDB
			spec.Addr = u.Host
			if set := opt.Sentinel.MasterSet; set != "" {
				// A Sentinel-managed master: the host and every addr= are
				// sentinels. The master set is one node of the quorum,
				// named by its set's name, wherever its master runs.
				spec.Addr = "sentinel(" + set + ")"
			} else if extra := u.Query()["addr"]; len(extra) > 0 {
				// Extra seeds make this node one Redis Cluster: one
				// independent master of the quorum, however many shards it has.
				if spec.DB != 0 {
					return nil, invalid("node %d: a Redis Cluster has only db 0", i)
				}
				spec.Cluster = true
				spec.Addr = "cluster(" + strings.Join(opt.InitAddress, ",") + ")"
			}
			if spec.DB != 0 {
				spec.Addr += "/" + strconv.Itoa(spec.DB)
			}
			if cfg.TLS != nil && opt.TLSConfig != nil {
				spec.Client.TLSConfig = cfg.TLS.Clone()
			}
		} else {
			if _, _, err := splitHostPort(n); err != nil {
				return nil, invalid("node %d: %q is not host:port", i, n)
			}
			spec.Addr = n
			spec.Client = rueidis.ClientOption{InitAddress: []string{n}, Username: cfg.Username, Password: cfg.Password}
			if cfg.TLS != nil {
				spec.Client.TLSConfig = cfg.TLS.Clone()
			}
		}
		if seen[spec.Addr] {
			return nil, invalid("node %q listed twice", spec.Addr)
		}
		seen[spec.Addr] = true
		if cfg.ClientOption != nil {
			cfg.ClientOption(i, &spec.Client)
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// urlParams are the node URL parameters that rueidis.ParseURL reads and
// that we accept; any other is refused rather than ignored.
var urlParams = map[string]bool{"addr": true, "db": true, "master_set": true, "dial_timeout": true, "write_timeout": true,
	"skip_verify": true, "protocol": true, "client_cache": true, "max_retries": true, "client_name": true}

// checkURL refuses what rueidis.ParseURL would accept silently: no host
// (it dials localhost:6379), a bad port, an unknown parameter or
// protocol, an empty master set.
func checkURL(u *url.URL) error {
	switch u.Scheme {
	case "redis", "rediss", "valkey", "valkeys":
	default:
		return fmt.Errorf("scheme %q is not supported (use redis:// or rediss://)", u.Scheme)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("no host (want %s://host:port)", u.Scheme)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return fmt.Errorf("port %q out of range [1, 65535]", p)
		}
	}
	q := u.Query()
	if q.Has("master_set") && q.Get("master_set") == "" {
		return fmt.Errorf("master_set is empty: name the Sentinel master set")
	}
	for k := range q {
		if !urlParams[k] {
			return fmt.Errorf("unknown parameter %q (known: addr, db, master_set, dial_timeout, write_timeout, skip_verify, protocol, client_cache, max_retries, client_name)", k)
		}
	}
	if p := q.Get("protocol"); q.Has("protocol") && p != "2" && p != "3" {
		return fmt.Errorf("protocol=%s: want 2 (RESP2) or 3 (RESP3, the default)", p)
	}
	if q.Has("skip_verify") && u.Scheme != "rediss" && u.Scheme != "valkeys" {
		return fmt.Errorf("skip_verify needs a TLS URL (rediss://)")
	}
	for _, a := range q["addr"] {
		if _, _, err := splitHostPort(a); err != nil {
			return fmt.Errorf("addr=%s is not host:port", a)
		}
	}
	return nil
}

// redactURL returns u as text without its password.
func redactURL(u *url.URL) string {
	v := *u
	v.RawQuery = ""
	return v.Redacted()
}

func splitHostPort(s string) (string, int, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return "", 0, fmt.Errorf("missing port")
	}
	p, err := strconv.Atoi(s[i+1:])
	if err != nil || p <= 0 || p > 65535 {
		return "", 0, fmt.Errorf("bad port")
	}
	return s[:i], p, nil
}

// redactURLError keeps passwords out of error messages.
func redactURLError(err error) string {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err.Error()
	}
	return err.Error()
}

func (cfg *Config) keyspacePolicy() nodeactor.KeyspacePolicy {
	switch cfg.Keyspace {
	case KeyspaceOn:
		return nodeactor.KeyspaceOn
	case KeyspaceOff:
		return nodeactor.KeyspaceOff
	}
	return nodeactor.KeyspaceAuto
}
