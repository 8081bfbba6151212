#!/usr/bin/env bash
# Runs the whole test suite: installs redis-server and a C compiler (for
# -race) when they are missing (Debian or Ubuntu, as root or with sudo),
# then runs every package's tests with the
# race detector. Integration tests start their own redis-server processes on
# free loopback ports; REDLOCK_REQUIRE_REDIS=1 makes them fail, not skip, if
# redis-server cannot be found. PostgreSQL and MariaDB (installed the same
# way) serve the database tests of package fencesql, a module of its own
# (fencesql/internal/sqltest), run after the main suite.
#
# Then the server matrix: scripts/servers.sh fetches Redis 8.0 and Valkey 9
# from Debian unstable and Redis 8.4+ from experimental into .cache/servers
# (no system change), and the packages that talk to servers —
# internal/redisproc, testutil, nodeactor, coordinator, primitives: every
# primitive, the fault, ACL, cluster, TLS, RESP2 and native-command tests
# — run again against each (REDLOCK_REDIS_SERVER / REDLOCK_REDIS_CLI), with
# the race detector too (the timing-sensitive tests are tuned under it; it
# costs little: they wait on servers). A failed download fails the run. REDLOCK_MATRIX=0 skips the matrix (a quick local run);
# arguments are passed to every go test (e.g. -run TestACL).
#
# REDLOCK_SQL=0 skips the SQL suites: PostgreSQL and MariaDB are not
# installed and fencesql/internal/sqltest is neither vetted nor tested.
# With REDLOCK_MATRIX=0 REDLOCK_SQL=0 the run needs no network once
# redis-server, redis-cli and gcc are installed and the modules are in the
# module cache (go mod download, here and in bench/).
set -euo pipefail
cd "$(dirname "$0")/.."

# redis-server for every integration test; redis-cli (package redis-tools,
# a dependency of redis-server on Debian) for the Redis Cluster tests
# (redis-cli --cluster create); a C compiler for `go test -race`, which
# needs cgo (Go turns cgo off when it finds no C compiler, and -race then
# fails with "-race requires cgo").
pkgs=()
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "test.sh: redis-server or redis-cli missing; installing them" >&2
  pkgs+=(redis-server redis-tools)
  # The package may start a system instance on 6379; tests never use it.
fi
cc=$(go env CC)
if ! command -v "${cc%% *}" >/dev/null 2>&1; then
  echo "test.sh: no C compiler ($cc) for go test -race; installing gcc" >&2
  pkgs+=(gcc libc6-dev)
fi
if [ ${#pkgs[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null
  else
    echo "test.sh: cannot install ${pkgs[*]} here (no apt-get); install them and re-run" >&2
    exit 1
  fi
fi
if [ "$(go env CGO_ENABLED)" != 1 ]; then
  # CGO_ENABLED=0 in the environment (or in go env -w): -race needs cgo.
  echo "test.sh: cgo is off (CGO_ENABLED=$(go env CGO_ENABLED)); turning it on for go test -race" >&2
  export CGO_ENABLED=1
fi
redis-server --version
redis-cli --version

# PostgreSQL and MariaDB for package fencesql's tests (the module
# fencesql/internal/sqltest, which starts its own servers in temporary
# directories on free loopback ports, as an unprivileged user).
# REDLOCK_REQUIRE_PG=1 / REDLOCK_REQUIRE_MYSQL=1 make them fail, not skip,
# when a server cannot be found.
sql=${REDLOCK_SQL:-1}
db_pkgs=()
[ "$sql" = 0 ] || compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || command -v postgres >/dev/null 2>&1 || db_pkgs+=(postgresql)
[ "$sql" = 0 ] || command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || db_pkgs+=(mariadb-server)
if [ ${#db_pkgs[@]} -gt 0 ]; then
  echo "test.sh: ${db_pkgs[*]} missing; installing" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: cannot install ${db_pkgs[*]} here (no apt-get); install them and re-run" >&2
    exit 1
  fi
  # The packages would start system instances; none is needed: a
  # policy-rc.d that refuses (only while installing, if there is none).
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${db_pkgs[@]}" >/dev/null
  if [ -n "$policy" ]; then $SUDO rm -f "$policy"; fi
fi
export REDLOCK_REQUIRE_PG=1 REDLOCK_REQUIRE_MYSQL=1
sqltest=fencesql/internal/sqltest

export REDLOCK_REQUIRE_REDIS=1
# The matrix's servers download while the main suite runs (the network
# waits, not the CPU); the matrix waits for them below.
servers_pid=""
servers_log=""
if [ "${REDLOCK_MATRIX:-1}" != 0 ]; then
  servers_log=$(mktemp)
  ./scripts/servers.sh >"$servers_log" 2>&1 &
  servers_pid=$!
  trap 'kill "$servers_pid" 2>/dev/null || true' EXIT
fi
go vet ./...
# fencesql's database tests: a module of their own (SQL drivers stay out of
# the library's go.mod)
[ "$sql" = 0 ] || (cd "$sqltest" && go vet ./...)
if [ -d bench ] && [ -f bench/go.mod ]; then
  # the peer benchmark module (its own go.mod): it has no tests, build and vet it
  (cd bench && go build ./... && go vet ./...)
fi
# -parallel 4: the parallel tests mostly wait on servers (TTLs, guards,
# failovers); at GOMAXPROCS (2 here) they ran two at a time.
par=(-parallel 4)
extra=("$@")

# gotest NAME ARGS...: one go test process, each line prefixed with NAME.
gotest() {
  local name=$1
  shift
  go test -race -count=1 "${par[@]}" -timeout 20m "$@" 2>&1 | sed -u "s/^/[$name] /"
}

# The primitives package is the long one (about nine of the main suite's
# ten minutes), and its tests mostly wait on servers: the CPU is idle
# four fifths of the time (measured: 42 s of CPU in a 102 s run). So it
# runs as two processes beside the other packages, the three at once:
# the multi-server and guard suites with the Lock's fault tests, which run
# one at a time (shard a: about 265 s), and the rest (about 215 s). The
# adversarial suites are a package of their own, tests/adversarial, run
# with the others.
shard='^Test(Cluster|Sentinel|Guard|LockFault)'

# quiet: tests that time a proxy's held request against the client's
# retries, and under the shards' load met interleavings they do not set up
# (TestDirectGrantSurvivesLateRollback: W's later attempt overtook the
# held rollback once rueidis replaced the held connection; see its
# history). They run after the shards, alone.
quiet='^TestDirectGrantSurvivesLateRollback$'

# suite NAME SKIP PKG...: go test of PKG (-skip SKIP if not empty), the
# primitives package split in its two shards, then its quiet tests alone.
# Arguments given to test.sh (a -run of the caller's own, say) turn the
# shards off.
suite() {
  local name=$1 skip=$2
  shift 2
  local prim p has=0 rc=0
  prim=$(go list ./primitives)
  local -a rest=() sk=() pids=()
  for p in $(go list "$@"); do
    if [ "$p" = "$prim" ]; then has=1; else rest+=("$p"); fi
  done
  [ -n "$skip" ] && sk=(-skip "$skip")
  if [ $has = 0 ] || [ ${#extra[@]} -gt 0 ]; then
    gotest "$name" "${sk[@]}" "$@" "${extra[@]}"
    return
  fi
  if [ ${#rest[@]} -gt 0 ]; then
    gotest "$name" "${sk[@]}" "${rest[@]}" &
    pids+=($!)
  fi
  gotest "$name:primitives-a" -run "$shard" "${sk[@]}" ./primitives &
  pids+=($!)
  gotest "$name:primitives-b" -skip "$shard|$quiet${skip:+|$skip}" ./primitives &
  pids+=($!)
  for p in "${pids[@]}"; do
    wait "$p" || rc=1
  done
  gotest "$name:primitives-quiet" -run "$quiet" "${sk[@]}" ./primitives || rc=1
  return $rc
}

# sims: the node guard's simulated-cluster tests (internal/guard), run
# without -race after the suite. They drive the guard's decisions through
# a million virtual-time events, and under -race ThreadSanitizer's own
# runtime aborted once in a clean-clone run ("CHECK failed:
# tsan_rtl.cpp:346 ... fast_state.epoch() == kEpochLast", its epoch
# reset, not a race report). What they check is the decisions, not memory
# access; the same guard code runs under -race in every real-server guard
# test (primitives' TestGuard*, tests/adversarial).
sims='^TestSim(HeldOutForTheTTLsInUse|RandomSchedules)$'
# Each test process with real-server quorum tests watches its own stalls
# (testutil.WatchStalls) and appends a line here; the run prints them: a
# one-shot call that failed with every node silent at once lines up with
# a stall of its process.
stalls=$(mktemp)
export REDLOCK_STALLS=$stalls
start=$SECONDS
rc_main=0
suite main "$sims" ./... || rc_main=1
go test -count=1 -run "$sims" ./internal/guard 2>&1 | sed -u "s/^/[main:sims] /" || rc_main=1
echo "test.sh: full suite on $(redis-server --version | cut -d' ' -f1-3): $((SECONDS - start)) s"
sed 's/^/test.sh: /' "$stalls"
rm -f "$stalls"
unset REDLOCK_STALLS
[ $rc_main = 0 ] || exit 1
if [ "$sql" = 0 ]; then
  echo "test.sh: REDLOCK_SQL=0: $sqltest (PostgreSQL, MariaDB, SQLite) skipped"
else
  start=$SECONDS
  (cd "$sqltest" && go test -race -count=1 -timeout 10m ./... "$@")
  echo "test.sh: $sqltest (PostgreSQL, MariaDB, SQLite): $((SECONDS - start)) s"
fi

if [ "${REDLOCK_MATRIX:-1}" = 0 ]; then
  echo "test.sh: REDLOCK_MATRIX=0: server matrix skipped"
  exit 0
fi
servers_ok=0
wait "$servers_pid" || servers_ok=$?
cat "$servers_log" >&2
rm -f "$servers_log"
if [ "$servers_ok" != 0 ]; then
  echo "test.sh: scripts/servers.sh failed (exit $servers_ok)" >&2
  exit 1
fi
bin=.cache/servers/bin
matrix_pkgs=(./internal/redisproc ./testutil ./nodeactor ./coordinator ./primitives)
failed=()
# name, then extra environment; Valkey has SET ... IFEQ ... PX and DELIFEQ,
# Redis 8.4+ (redisnext, from Debian experimental) SET ... IFEQ and DELEX, so
# their runs must exercise the native renewal and probes (Redis 8.0 has
# neither). redisnext runs a subset — the native commands' tests, renewals,
# ACL, TLS, RESP2 and every primitive's basic cycle — to keep CI's time down:
# the Lock's fault tests other than renewal's and the Semaphore's property
# test (client logic, about 100 s and 60 s there) run on Redis 7.0 only.
next_run='Native|Probe|Renew|Retake|ACL|TLS|RESP2|TestLock|TestFairLock|TestSemaphore|TestRWLock|TestMultiLock|TestLatch'
next_skip='TestLockFault(S1Pause|FiveNodes|CancelWaiter|NewWithFirstNode|CleanState|LateRollback|FenceMonotonic|NotifyContention|MajorityPaused|HandoffOrder|ProxyDropped|ReleaseDuringPause)|TestSemaphoreProperty'
# The adversarial suites (tests/adversarial, every TestAdv*: the node
# guard's, leader observation's, the direct grant's late messages, the
# marked grant's) attack the protocol's logic, not a server's behaviour,
# and wait out many TTLs: they run once, on Redis 7.0, above; their
# package is not in matrix_pkgs. So does the guard's recovery measurement,
# and the races between processes' guards that the unarmed-since token
# closes (stale states, held armings). The guard's other tests
# (TestGuard*), the cluster resharding tests and the Sentinel failovers
# run on every server.
matrix_skip='TestGuardRestartedNodeCountsAgain|TestGuardSecondFlush|TestClusterGuard(StaleArming|PartitionedGuard|HorizonUnread|SecondForget)'
for entry in "redis8" "valkey9 REDLOCK_EXPECT_NATIVE_CAS=1 REDLOCK_EXPECT_NATIVE_CAD=delifeq" \
  "redisnext REDLOCK_EXPECT_NATIVE_CAS=1 REDLOCK_EXPECT_NATIVE_CAD=delex"; do
  read -r name envs <<<"$entry"
  run=()
  skip=$matrix_skip
  case $name in
  redisnext)
    run=(-run "$next_run")
    skip="$matrix_skip|$next_skip"
    ;;
  redis8 | valkey9)
    # Redis 8.0 and Valkey 9 run everything but the Lock's client-logic
    # fault tests and the Semaphore's property test (about 3 minutes
    # each): they run on Redis 7.0. Valkey's native renewal is exercised
    # by its renewal and re-take tests (Renew|Retake), under faults too.
    skip="$matrix_skip|$next_skip"
    ;;
  esac
  start=$SECONDS
  echo "test.sh: matrix: $("$bin/$name-server" --version | cut -d' ' -f1-3)"
  # shellcheck disable=SC2086 # envs: NAME=value words
  if ! (
    export REDLOCK_REDIS_SERVER="$PWD/$bin/$name-server" REDLOCK_REDIS_CLI="$PWD/$bin/$name-cli" $envs
    if [ ${#run[@]} -gt 0 ]; then
      gotest "$name" -skip "$skip" "${run[@]}" "${matrix_pkgs[@]}" "${extra[@]}"
    else
      suite "$name" "$skip" "${matrix_pkgs[@]}"
    fi
  ); then
    failed+=("$name")
  fi
  echo "test.sh: matrix: $name: $((SECONDS - start)) s"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: FAILED on: ${failed[*]}" >&2
  exit 1
fi
echo "test.sh: matrix passed: Redis 7.0 (full suite), $(tr '\n' ' ' <.cache/servers/versions)"
