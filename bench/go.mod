// The module path sits below cmd/redlock, not at bench/, so that Go lets it
// import the CLI's internal benchmark engine (see README.md).
module github.com/redlock-go/redlock/cmd/redlock/bench

go 1.26.0

replace github.com/redlock-go/redlock => ../

require (
	github.com/bsm/redislock v0.9.4
	github.com/go-redsync/redsync/v4 v4.17.0
	github.com/redis/go-redis/v9 v9.23.0-beta.1
	github.com/redis/rueidis v1.0.79
	github.com/redlock-go/redlock v0.0.0-00010101000000-000000000000
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/sourcegraph/conc v0.3.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.opentelemetry.io/otel v1.46.0 // indirect
	go.opentelemetry.io/otel/metric v1.46.0 // indirect
	go.opentelemetry.io/otel/trace v1.46.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
