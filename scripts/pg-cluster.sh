#!/usr/bin/env bash
# A private PostgreSQL cluster for the tests: its own data folder under the build folder, a free
# port on 127.0.0.1, trust authentication (but for the role ts_password, which must give a password,
# so that tests can be refused one), fsync on. Nothing depends on a server outside the run.
#   scripts/pg-cluster.sh start     install PostgreSQL (Debian's package) when initdb is missing,
#                                   start the cluster (or reuse the running one), print its URL
#   scripts/pg-cluster.sh url       the admin URL: postgres://postgres@127.0.0.1:PORT/postgres
#   scripts/pg-cluster.sh restart   pg_ctl restart -m fast (a PostgreSQL restart under load)
#   scripts/pg-cluster.sh stop      pg_ctl stop -m immediate (nothing in it is kept for later)
#   scripts/pg-cluster.sh status    exit 0 when running
#   scripts/pg-cluster.sh bindir    install PostgreSQL when missing; print the folder of its programs
#   scripts/pg-cluster.sh home      the folder of the running cluster (its data/ and poolers live there)
# The folder is $TURNSTREAM_PG_DIR, by default pg/ in the build folder (${CARGO_TARGET_DIR:-target}).
# As root, initdb and the server run as the `postgres` OS user, which must own the folder and be
# able to reach it; where the checkout's parent folders are closed to that user, the cluster lives
# in a private temporary folder instead and the build folder keeps a pointer to it.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-target}"
case "$TARGET" in /*) ;; *) TARGET="$ROOT/$TARGET" ;; esac
STATE="${TURNSTREAM_PG_DIR:-$TARGET/pg}"
case "$STATE" in /*) ;; *) STATE="$ROOT/$STATE" ;; esac
PG_USER=postgres       # the OS user the server runs as when we are root
PASSWORD_ROLE=ts_password  # the one role that must give a password (scripts/pg-pooler.sh too)
MAX_CONNECTIONS=400    # 3 nodes x their pools x parallel tests, with room to spare

say() { printf 'pg-cluster: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

is_root() { [ "$(id -u)" = 0 ]; }

# The folder of initdb/pg_ctl/postgres: pg_config's, else the newest /usr/lib/postgresql/*/bin
# (Debian does not put them on PATH), else PATH.
find_bindir() {
  local d
  if command -v pg_config >/dev/null 2>&1; then
    d="$(pg_config --bindir 2>/dev/null || true)"
    if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
      echo "$d"
      return 0
    fi
  fi
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
    echo "$d"
    return 0
  fi
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
    return 0
  fi
  return 1
}

install_postgres() {
  local sudo=""
  is_root || sudo="sudo"
  command -v apt-get >/dev/null 2>&1 ||
    die "PostgreSQL's initdb is missing and there is no apt-get to install it: install PostgreSQL's server package"
  say "installing PostgreSQL (Debian's postgresql package)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
}

bindir() {
  local d
  if ! d="$(find_bindir)"; then
    install_postgres
    d="$(find_bindir)" || die "PostgreSQL was installed but initdb/pg_ctl were not found"
  fi
  echo "$d"
}

# Runs a PostgreSQL program as the user that owns the cluster (initdb refuses root).
as_pg() {
  if is_root; then
    if command -v runuser >/dev/null 2>&1; then
      (cd / && runuser -u "$PG_USER" -- "$@")
    else
      local q
      q="$(printf '%q ' "$@")"
      (cd / && su -s /bin/sh "$PG_USER" -c "$q")
    fi
  else
    "$@"
  fi
}

ensure_pg_user() {
  is_root || return 0
  if ! id "$PG_USER" >/dev/null 2>&1; then
    say "creating the OS user $PG_USER"
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin "$PG_USER"
  fi
}

# Can the cluster's user reach and write $1?
reachable() {
  is_root || return 0
  as_pg test -d "$1" -a -x "$1" -a -w "$1"
}

# The cluster's folder: $STATE itself, or (as root, when $STATE's parents are closed to the
# cluster's user) a private temporary folder that $STATE/location points to.
cluster_home() {
  if [ -f "$STATE/location" ]; then
    local home
    home="$(cat "$STATE/location")"
    if [ -d "$home" ]; then
      echo "$home"
      return 0
    fi
  fi
  echo "$STATE"
}

prepare_home() {
  mkdir -p "$STATE"
  local home
  home="$(cluster_home)"
  if ! is_root; then
    echo "$home"
    return 0
  fi
  ensure_pg_user
  if [ "$home" = "$STATE" ]; then
    chown "$PG_USER:" "$STATE"
    chmod 700 "$STATE"
    if reachable "$STATE"; then
      echo "$STATE"
      return 0
    fi
    say "the OS user $PG_USER cannot reach $STATE (a parent folder is closed to it);"
    say "keeping the cluster in a private temporary folder instead (see $STATE/location)"
    home="$(mktemp -d "${TMPDIR:-/tmp}/turnstream-pg.XXXXXX")"
    chmod 711 "$home"
    mkdir "$home/cluster"
    home="$home/cluster"
    chown "$PG_USER:" "$home"
    chmod 700 "$home"
    reachable "$home" || die "the OS user $PG_USER cannot reach $home either"
    echo "$home" >"$STATE/location"
  fi
  echo "$home"
}

free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
    return 0
  fi
  local p i
  for i in $(seq 1 200); do
    p=$((20000 + RANDOM % 40000))
    if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then
      echo "$p"
      return 0
    fi
  done
  die "no free port found"
}

running() {
  local home bin
  home="$(cluster_home)"
  [ -f "$home/data/PG_VERSION" ] || return 1
  bin="$(find_bindir)" || return 1
  as_pg "$bin/pg_ctl" status -D "$home/data" >/dev/null 2>&1
}

url() {
  local home
  home="$(cluster_home)"
  [ -f "$home/port" ] || die "no cluster has been started (run: $0 start)"
  echo "postgres://postgres@127.0.0.1:$(cat "$home/port")/postgres"
}

# Settings written on each start (the port may change); postgresql.conf includes the file.
write_conf() {
  local home="$1" port="$2" sockets
  sockets="$home/data"
  # A Unix socket's path is limited to about 100 bytes; past that, TCP only.
  if [ $((${#sockets} + 20)) -gt 100 ]; then sockets=""; fi
  as_pg tee "$home/data/turnstream.conf" >/dev/null <<EOF
# Written by scripts/pg-cluster.sh on each start.
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$sockets'
max_connections = $MAX_CONNECTIONS
fsync = on
synchronous_commit = on
full_page_writes = on
EOF
  as_pg tee "$home/data/pg_hba.conf" >/dev/null <<EOF
# Written by scripts/pg-cluster.sh on each start.
local all all trust
host all $PASSWORD_ROLE 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
host all all ::1/128 trust
EOF
}

start() {
  local bin home port attempt
  bin="$(bindir)"
  if running; then
    url
    return 0
  fi
  home="$(prepare_home)"
  if [ ! -f "$home/data/PG_VERSION" ]; then
    say "creating a cluster in $home/data ($("$bin/postgres" --version))"
    rm -rf "$home/data"
    as_pg "$bin/initdb" -D "$home/data" -U postgres -A trust -E UTF8 --locale=C >"$STATE/initdb.log" 2>&1 ||
      { cat "$STATE/initdb.log" >&2; die "initdb failed"; }
    echo "include_if_exists = 'turnstream.conf'" | as_pg tee -a "$home/data/postgresql.conf" >/dev/null
  fi
  for attempt in 1 2 3; do
    port="$(free_port)"
    write_conf "$home" "$port"
    echo "$port" >"$home/port"
    if as_pg "$bin/pg_ctl" start -w -t 60 -D "$home/data" -l "$home/postgres.log" >/dev/null; then
      say "PostgreSQL is running on 127.0.0.1:$port (log: $home/postgres.log)"
      # Databases of an earlier run that ended before dropping them.
      local stale
      stale="$("$bin/psql" -X -q -At -d "$(url)" -c "SELECT datname FROM pg_database WHERE datname LIKE 'ts\_%'" || true)"
      for db in $stale; do
        "$bin/psql" -X -q -d "$(url)" -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
      done
      url
      return 0
    fi
    say "start on port $port failed (attempt $attempt); the server log ends with:"
    tail -n 5 "$home/postgres.log" >&2 || true
  done
  die "PostgreSQL did not start"
}

restart() {
  local bin home
  bin="$(bindir)"
  running || die "the cluster is not running"
  home="$(cluster_home)"
  as_pg "$bin/pg_ctl" restart -m fast -w -t 60 -D "$home/data" -l "$home/postgres.log" >/dev/null
}

stop() {
  local bin home
  running || return 0
  # The poolers in front of it (scripts/pg-pooler.sh) go first.
  bash "$ROOT/scripts/pg-pooler.sh" stop || true
  bin="$(find_bindir)"
  home="$(cluster_home)"
  as_pg "$bin/pg_ctl" stop -m immediate -w -t 60 -D "$home/data" >/dev/null
  say "stopped"
}

# Sourced by scripts/pg-pooler.sh for its helpers: no command then.
if [ "${BASH_SOURCE[0]}" != "$0" ]; then return 0; fi

case "${1:-}" in
  start) start ;;
  home) running || die "the cluster is not running (run: $0 start)"; cluster_home ;;
  url) running || die "the cluster is not running (run: $0 start)"; url ;;
  restart) restart ;;
  stop) stop ;;
  status) running ;;
  bindir) bindir ;;
  *) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
