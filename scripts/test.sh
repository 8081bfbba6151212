#!/usr/bin/env bash
# Runs the whole test suite: installs redis-server when it is missing (Debian
# or Ubuntu, as root or with sudo), then runs every package's tests with the
# race detector. Integration tests start their own redis-server processes on
# free loopback ports; REDLOCK_REQUIRE_REDIS=1 makes them fail, not skip, if
# redis-server cannot be found.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  echo "test.sh: redis-server missing; installing it" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
  else
    echo "test.sh: cannot install redis-server here (no apt-get); install it and re-run" >&2
    exit 1
  fi
  # The package may start a system instance on 6379; tests never use it.
fi
redis-server --version

export REDLOCK_REQUIRE_REDIS=1
go vet ./...
if [ -d bench ] && [ -f bench/go.mod ]; then
  # the peer benchmark module (its own go.mod): it has no tests, build and vet it
  (cd bench && go build ./... && go vet ./...)
fi
go test -race -count=1 -timeout 20m ./... "$@"
