#!/usr/bin/env bash
# Fetches the servers of the compatibility matrix — Redis 8 and Valkey 9 from
# Debian's unstable suite — without touching the system: apt runs with a
# private state directory (its own sources list, package lists and cache,
# an empty dpkg status), `apt-get download` fetches the server packages and
# the shared libraries they need, `dpkg-deb -x` unpacks them into a private
# prefix, and a wrapper per program runs it through that prefix's dynamic
# loader (ld-linux-x86-64.so.2 --library-path ... --argv0 ...). The system's
# libc and packages stay as they are (unstable's servers need a newer libc).
#
# Redis 8.4+ (the first with DELEX ... IFEQ, the native compare-and-delete)
# is not in unstable yet: "redisnext" is redis-tools from Debian's
# experimental suite (8.6 when written), unpacked into a prefix of its own
# and run with the same libraries. If experimental stops carrying a Redis
# that has DELEX, the check below fails: pick another suite with
# REDLOCK_SERVERS_NEXT_SUITE.
#
# Usage: scripts/servers.sh [DIR]    (default: .cache/servers in the repo)
#
# Afterwards DIR/bin holds redis8-server, redis8-cli, valkey9-server,
# valkey9-cli, redisnext-server and redisnext-cli, and DIR/env.sh one line
# per server. Each wrapper is checked
# (--version, a server answering PING and a script); any failure — a
# download included — exits non-zero. A finished prefix is reused: delete
# DIR to fetch again.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${1:-.cache/servers}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
SUITE=${REDLOCK_SERVERS_SUITE:-unstable}
NEXT_SUITE=${REDLOCK_SERVERS_NEXT_SUITE:-experimental}
MIRROR=${REDLOCK_SERVERS_MIRROR:-http://deb.debian.org/debian}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
# The packages that hold the binaries (redis-server and valkey-server are
# only symlinks to redis-check-rdb / valkey-check-rdb, which pick their
# role from argv[0]).
PKGS=(redis-tools valkey-tools)

log() { echo "servers.sh: $*" >&2; }
die() {
	log "FAILED: $*"
	exit 1
}

need() {
	command -v "$1" >/dev/null 2>&1 || die "$1 not found (it is part of Debian's apt/dpkg)"
}
need apt-get
need apt-cache
need dpkg-deb
[ -r "$KEYRING" ] || die "$KEYRING missing (Debian package debian-archive-keyring)"

APT="$DIR/apt"
ROOT="$DIR/root"
NEXT_ROOT="$DIR/root-next"
BIN="$DIR/bin"
STAMP="$DIR/.complete"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$SUITE $NEXT_SUITE $MIRROR" ]; then
	log "reusing $DIR ($(tr '\n' ' ' <"$DIR/versions"))"
else
	rm -rf "$APT" "$ROOT" "$NEXT_ROOT" "$BIN" "$STAMP"
	mkdir -p "$APT/etc/sources.list.d" "$APT/etc/preferences.d" "$APT/etc/apt.conf.d" \
		"$APT/state/lists/partial" "$APT/cache/archives/partial" "$APT/debs" "$APT/debs-next"
	: >"$APT/state/status"
	cat >"$APT/etc/sources.list.d/matrix.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $NEXT_SUITE
Components: main
Signed-By: $KEYRING
EOF
	# Private everything: no system source, preference, lock or status is
	# read or written; the download runs as the invoking user.
	OPTS=(-q -o "Dir::Etc=$APT/etc" -o "Dir::Etc::SourceList=$APT/etc/none.list"
		-o "Dir::Etc::Parts=$APT/etc/apt.conf.d" -o "Dir::Etc::Preferences=$APT/etc/none.pref"
		-o "Dir::Etc::PreferencesParts=$APT/etc/preferences.d"
		-o "Dir::State=$APT/state" -o "Dir::State::status=$APT/state/status"
		-o "Dir::Cache=$APT/cache" -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)"
		-o "APT::Architecture=amd64" -o "APT::Architectures::=amd64")
	# (experimental is "NotAutomatic": plain names still resolve to $SUITE)
	log "apt-get update ($SUITE and $NEXT_SUITE from $MIRROR, private state in $APT)"
	apt-get "${OPTS[@]}" update >"$APT/update.log" 2>&1 || {
		cat "$APT/update.log" >&2
		die "apt-get update of $SUITE"
	}
	if grep -qE '^(W|E): ' "$APT/update.log"; then
		cat "$APT/update.log" >&2
		die "apt-get update of $SUITE reported errors or warnings"
	fi
	# The shared libraries: the packages' library dependencies (lib*, zlib*)
	# and, recursively, theirs (the rest of their dependencies — adduser,
	# systemd — are for installing a service, not for running the binary).
	# The check in wrapper below fails if a library is still missing.
	direct=$(apt-cache "${OPTS[@]}" depends --no-recommends --no-suggests --no-conflicts --no-breaks \
		--no-replaces --no-enhances "${PKGS[@]}" | awk '$1 ~ /Depends:/ {print $2}' | grep -E '^z?lib' | sort -u) ||
		die "apt-cache depends ${PKGS[*]}"
	libs=$(apt-cache "${OPTS[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
		--no-replaces --no-enhances $direct | grep -v '^ ' | grep -E '^z?lib' | sort -u) ||
		die "apt-cache depends --recurse $direct"
	log "downloading ${PKGS[*]} and" $libs
	(cd "$APT/debs" && apt-get "${OPTS[@]}" download "${PKGS[@]}" $libs) >"$APT/download.log" 2>&1 || {
		cat "$APT/download.log" >&2
		die "apt-get download"
	}
	# the next Redis: its own prefix (its files have the same paths), the
	# libraries of the main one (the wrapper check fails if one is missing)
	(cd "$APT/debs-next" && apt-get "${OPTS[@]}" download "redis-tools/$NEXT_SUITE") >>"$APT/download.log" 2>&1 || {
		cat "$APT/download.log" >&2
		die "apt-get download redis-tools/$NEXT_SUITE"
	}
	mkdir -p "$ROOT" "$NEXT_ROOT"
	for deb in "$APT"/debs/*.deb; do
		dpkg-deb -x "$deb" "$ROOT" || die "dpkg-deb -x $deb"
	done
	for deb in "$APT"/debs-next/*.deb; do
		dpkg-deb -x "$deb" "$NEXT_ROOT" || die "dpkg-deb -x $deb"
	done
	LDSO=$(find "$ROOT" -name ld-linux-x86-64.so.2 -path '*/x86_64-linux-gnu/*' | head -n 1)
	[ -n "$LDSO" ] || die "no ld-linux-x86-64.so.2 in $ROOT (libc6 not unpacked?)"
	LIBPATH="$ROOT/usr/lib/x86_64-linux-gnu:$ROOT/lib/x86_64-linux-gnu"
	mkdir -p "$BIN"
	# wrapper NAME ARGV0 TARGET [ROOT]
	wrapper() {
		local root=${4:-$ROOT}
		local target="$root/usr/bin/$3"
		[ -x "$target" ] || die "$target missing"
		cat >"$BIN/$1" <<EOF
#!/bin/sh
# Generated by scripts/servers.sh: runs $3 (as $2) from $SUITE through the
# private prefix's own loader and libraries. exec keeps the PID, so signals
# reach the server itself.
exec "$LDSO" --library-path "$LIBPATH" --argv0 $2 "$target" "\$@"
EOF
		chmod +x "$BIN/$1"
		# every library must resolve inside the prefix (one taken from the
		# system would work here and fail on a machine without it)
		local libs
		libs=$("$LDSO" --library-path "$LIBPATH" --list "$target") || die "$LDSO --list $target"
		if echo "$libs" | grep '=>' | grep -v "=> $ROOT/" | grep -v "=> $NEXT_ROOT/" | grep -q .; then
			echo "$libs" >&2
			die "$3: a shared library is missing from the prefix (add its package to the download)"
		fi
	}
	wrapper redis8-server redis-server redis-check-rdb
	wrapper redis8-cli redis-cli redis-cli
	wrapper valkey9-server valkey-server valkey-check-rdb
	wrapper valkey9-cli valkey-cli valkey-cli
	wrapper redisnext-server redis-server redis-check-rdb "$NEXT_ROOT"
	wrapper redisnext-cli redis-cli redis-cli "$NEXT_ROOT"
	: >"$DIR/versions"
	for p in "${PKGS[@]}"; do
		echo "$p=$(dpkg-deb -f "$APT"/debs/"${p}"_*.deb Version)" >>"$DIR/versions"
	done
	echo "redis-tools/$NEXT_SUITE=$(dpkg-deb -f "$APT"/debs-next/redis-tools_*.deb Version)" >>"$DIR/versions"
fi

# Check each server: it runs, answers PING, runs a script and a SET ... PX;
# with "ifeq", it must also have the native compare-and-set SET ... IFEQ;
# with "delex", also the native compare-and-delete DELEX ... IFEQ.
check() {
	local name=$1 cli=$2 ifeq=${3:-} delex=${4:-}
	local port out dir pid
	"$BIN/$name" --version >/dev/null || die "$name --version"
	dir=$(mktemp -d)
	for _ in 1 2 3 4 5; do
		port=$((20000 + RANDOM % 20000))
		"$BIN/$name" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
			--daemonize no --logfile "$dir/log" &
		pid=$!
		for _ in $(seq 100); do
			out=$("$BIN/$cli" -p "$port" PING 2>/dev/null || true)
			[ "$out" = PONG ] && break
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.05
		done
		[ "$out" = PONG ] && break
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [ "$out" != PONG ]; then
		cat "$dir/log" >&2 || true
		rm -rf "$dir"
		die "$name does not answer PING"
	fi
	local script
	script=$("$BIN/$cli" -p "$port" EVAL "return redis.call('SET', KEYS[1], ARGV[1], 'PX', 1000)" 1 k v)
	local cas=OK
	if [ -n "$ifeq" ]; then
		cas=$("$BIN/$cli" -p "$port" SET k w IFEQ v PX 1000)
	fi
	local cad=1
	if [ -n "$delex" ]; then
		cad=$("$BIN/$cli" -p "$port" DELEX k IFEQ w)
	fi
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$dir"
	[ "$script" = OK ] || die "$name: a script's SET answered '$script'"
	[ "$cas" = OK ] || die "$name: SET k w IFEQ v PX 1000 answered '$cas'"
	[ "$cad" = 1 ] || die "$name: DELEX k IFEQ w answered '$cad'"
	log "ok: $("$BIN/$name" --version)"
}
check redis8-server redis8-cli
check valkey9-server valkey9-cli ifeq
check redisnext-server redisnext-cli ifeq delex

echo "$SUITE $NEXT_SUITE $MIRROR" >"$STAMP"
cat >"$DIR/env.sh" <<EOF
# Generated by scripts/servers.sh: REDLOCK_REDIS_SERVER / REDLOCK_REDIS_CLI per server.
redis8="REDLOCK_REDIS_SERVER=$BIN/redis8-server REDLOCK_REDIS_CLI=$BIN/redis8-cli"
valkey9="REDLOCK_REDIS_SERVER=$BIN/valkey9-server REDLOCK_REDIS_CLI=$BIN/valkey9-cli"
redisnext="REDLOCK_REDIS_SERVER=$BIN/redisnext-server REDLOCK_REDIS_CLI=$BIN/redisnext-cli"
EOF
