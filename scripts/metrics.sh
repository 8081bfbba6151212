#!/usr/bin/env bash
# Prints the codebase's numbers that issue 39 tracks: lines of library Go
# and Lua per package, library functions over 80 lines, test lines, and
# time.Sleep calls in tests. Run from anywhere in the repository; it reads
# files only.
set -euo pipefail
cd "$(dirname "$0")/.."
lib() { find . -path ./bench -prune -o -path ./.cache -prune -o -path ./fencesql/internal/sqltest -prune -o "$@" -print; }
echo "library lines per package (Go without tests, and Lua):"
lib \( -name '*.go' ! -name '*_test.go' -o -name '*.lua' \) -type f |
  xargs wc -l | grep -v ' total$' |
  awk '{d=$2; sub(/\/[^\/]*$/, "", d); n[d]+=$1; t+=$1} END {for (d in n) printf "  %6d %s\n", n[d], d; printf "  %6d total\n", t}' | sort -k2
echo "library functions over 80 lines (outside cmd/):"
lib -name '*.go' ! -name '*_test.go' -type f | grep -v '^./cmd/' |
  xargs awk 'FNR==1 {inf=0} /^func / {inf=1; s=FNR; name=$0} inf && /^}/ {if (FNR-s+1 > 80) printf "  %d %s: %s\n", FNR-s+1, FILENAME, substr(name, 1, 70); inf=0}' || true
echo "distinct internal/engine names primitives uses: $(ls primitives/*.go | grep -v _test.go | xargs grep -oh 'engine\.[A-Z][A-Za-z0-9]*' | sort -u | wc -l)"
echo "test lines: $(lib -name '*_test.go' -type f | xargs cat | wc -l)"
echo "time.Sleep in tests: $(lib -name '*_test.go' -type f | xargs grep -h 'time\.Sleep' | wc -l)"
# The sleeps inside a synctest bubble advance a fake clock: count them apart.
echo "  of which in synctest bubbles (virtual time): $(lib -name '*_test.go' -type f | xargs awk '
  FNR==1 {depth=0; inb=0}
  { line=$0
    if (!inb && line ~ /synctest\.(Test|Run)\(/) {inb=1; depth=0; started=0}
    if (inb && line ~ /time\.Sleep/) n++
    if (inb) { o=gsub(/\{/, "{", line); c=gsub(/\}/, "}", line); depth+=o-c; if (o>0) started=1; if (started && depth<=0) inb=0 } }
  END {print n+0}')"
echo "files one steady-state Lock.Acquire and Lease.Release enter (coverage counters, one redis-server):"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if go build -cover -covermode=atomic -coverpkg=github.com/redlock-go/redlock/... -o "$tmp/oppath" ./scripts/oppath 2>/dev/null &&
  GOCOVERDIR=$tmp "$tmp/oppath" >"$tmp/out" 2>&1; then
  sed 's/^/  /' "$tmp/out"
else
  echo "  (not measured: $(tail -1 "$tmp/out" 2>/dev/null || echo 'build failed'))"
fi
