#!/usr/bin/env bash
# Runs the whole test suite: installs redis-server when it is missing (Debian
# or Ubuntu, as root or with sudo), then runs every package's tests with the
# race detector. Integration tests start their own redis-server processes on
# free loopback ports; REDLOCK_REQUIRE_REDIS=1 makes them fail, not skip, if
# redis-server cannot be found.
set -euo pipefail
cd "$(dirname "$0")/.."

# redis-server for every integration test; redis-cli (package redis-tools,
# a dependency of redis-server on Debian) for the Redis Cluster tests
# (redis-cli --cluster create).
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "test.sh: redis-server or redis-cli missing; installing them" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
  else
    echo "test.sh: cannot install redis-server/redis-cli here (no apt-get); install them and re-run" >&2
    exit 1
  fi
  # The package may start a system instance on 6379; tests never use it.
fi
redis-server --version
redis-cli --version

export REDLOCK_REQUIRE_REDIS=1
go vet ./...
if [ -d bench ] && [ -f bench/go.mod ]; then
  # the peer benchmark module (its own go.mod): it has no tests, build and vet it
  (cd bench && go build ./... && go vet ./...)
fi
go test -race -count=1 -timeout 20m ./... "$@"
