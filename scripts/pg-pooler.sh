#!/usr/bin/env bash
# PgBouncer in front of the private PostgreSQL cluster (scripts/pg-cluster.sh), as managed
# databases put one: transaction or session pooling, the `options` startup parameter refused,
# passwords checked by the pooler for the role ts_password (trust for the others).
#   scripts/pg-pooler.sh start MODE   MODE is transaction or session: install PgBouncer (Debian's
#                                     package) when missing, start the cluster if needed, start the
#                                     pooler (or reuse the running one), print its URL
#   scripts/pg-pooler.sh url MODE     postgres://postgres@127.0.0.1:PORT/postgres (any database
#                                     name works: the pooler forwards each to the cluster's)
#   scripts/pg-pooler.sh stop [MODE]  stop one pooler, or both
#   scripts/pg-pooler.sh status MODE  exit 0 when running
#   scripts/pg-pooler.sh install      install PgBouncer when missing; print the program's path
# Each mode has its own folder and port beside the cluster's data (pooler-MODE/), owned by the
# `postgres` OS user when root: PgBouncer refuses to run as root.
set -euo pipefail

# shellcheck source=pg-cluster.sh
source "$(dirname "$0")/pg-cluster.sh"
say() { printf 'pg-pooler: %s\n' "$*" >&2; }

MODES="transaction session"
# Server connections per database and user. In session mode each client connection holds one:
# three nodes of a test keep up to 3 x (16 + 1 listening) open.
pool_size() { if [ "$1" = session ]; then echo 60; else echo 20; fi; }

check_mode() {
  case " $MODES " in
    *" ${1:-} "*) ;;
    *) die "the pool mode is transaction or session, not '${1:-}'" ;;
  esac
}

pgbouncer_bin() {
  local b
  for b in "$(command -v pgbouncer 2>/dev/null || true)" /usr/sbin/pgbouncer; do
    if [ -n "$b" ] && [ -x "$b" ]; then
      echo "$b"
      return 0
    fi
  done
  return 1
}

install_pgbouncer() {
  local sudo=""
  is_root || sudo="sudo"
  command -v apt-get >/dev/null 2>&1 ||
    die "pgbouncer is missing and there is no apt-get to install it: install PgBouncer"
  say "installing PgBouncer (Debian's pgbouncer package)"
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq pgbouncer >/dev/null
}

pooler_dir() { echo "$(cluster_home)/pooler-$1"; }

pooler_running() {
  local dir pid
  dir="$(pooler_dir "$1")"
  [ -f "$dir/pgbouncer.pid" ] || return 1
  pid="$(cat "$dir/pgbouncer.pid" 2>/dev/null || true)"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

pooler_url() {
  local dir
  dir="$(pooler_dir "$1")"
  [ -f "$dir/port" ] || die "no $1 pooler has been started (run: $0 start $1)"
  echo "postgres://postgres@127.0.0.1:$(cat "$dir/port")/postgres"
}

write_pooler_conf() {
  local mode="$1" dir="$2" port="$3" pg_port="$4"
  as_pg tee "$dir/pgbouncer.ini" >/dev/null <<EOF
; Written by scripts/pg-pooler.sh on each start.
[databases]
* = host=127.0.0.1 port=$pg_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
pool_mode = $mode
auth_type = hba
auth_hba_file = $dir/hba.conf
auth_file = $dir/userlist.txt
; Any role of the cluster may log in: the pooler looks it up there, as managed poolers do.
auth_user = postgres
admin_users = postgres
max_client_conn = 2000
default_pool_size = $(pool_size "$mode")
; A database dropped or restarted under the pooler is tried again at once.
server_login_retry = 1
server_connect_timeout = 5
; A query waits at most this long for a server connection (120 s by default): a database that
; is gone (dropped, down) is then an error in seconds, as the tests expect of the server.
query_wait_timeout = 10
log_connections = 0
log_disconnections = 0
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
  as_pg tee "$dir/hba.conf" >/dev/null <<EOF
host all $PASSWORD_ROLE 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
EOF
  # The pooler's own login (trust); every other role is looked up through it.
  as_pg tee "$dir/userlist.txt" >/dev/null <<EOF
"postgres" ""
EOF
}

# The pgbouncer program, installed first when missing.
pgbouncer_installed() {
  pgbouncer_bin && return 0
  install_pgbouncer
  pgbouncer_bin || die "PgBouncer was installed but pgbouncer was not found"
}

start_pooler() {
  local mode="$1" bin pg_url pg_port dir port attempt i
  check_mode "$mode"
  bin="$(pgbouncer_installed)"
  pg_url="$(start)"
  if pooler_running "$mode"; then
    pooler_url "$mode"
    return 0
  fi
  pg_port="${pg_url##*:}"
  pg_port="${pg_port%%/*}"
  dir="$(pooler_dir "$mode")"
  if [ ! -d "$dir" ]; then
    mkdir -p "$dir"
    if is_root; then chown "$PG_USER:" "$dir"; fi
    chmod 700 "$dir"
  fi
  for attempt in 1 2 3; do
    port="$(free_port)"
    write_pooler_conf "$mode" "$dir" "$port" "$pg_port"
    echo "$port" >"$dir/port"
    if as_pg "$bin" -q -d "$dir/pgbouncer.ini"; then
      for i in $(seq 1 100); do
        if "$(bindir)/psql" -X -q -At -d "$(pooler_url "$mode")" -c 'SELECT 1' >/dev/null 2>&1; then
          say "PgBouncer ($("$bin" --version | head -n 1), $mode pooling) is running on 127.0.0.1:$port (log: $dir/pgbouncer.log)"
          pooler_url "$mode"
          return 0
        fi
        sleep 0.1
      done
      stop_pooler "$mode"
    fi
    say "PgBouncer did not start on port $port (attempt $attempt); its log ends with:"
    tail -n 5 "$dir/pgbouncer.log" >&2 2>/dev/null || true
  done
  die "PgBouncer did not start"
}

stop_pooler() {
  local mode="$1" dir pid i
  pooler_running "$mode" || return 0
  dir="$(pooler_dir "$mode")"
  pid="$(cat "$dir/pgbouncer.pid")"
  # SIGTERM: PgBouncer closes every connection and exits at once.
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  say "the $mode pooler stopped"
}

case "${1:-}" in
  start) start_pooler "${2:-}" ;;
  url) check_mode "${2:-}"; pooler_running "$2" || die "the $2 pooler is not running (run: $0 start $2)"; pooler_url "$2" ;;
  stop)
    if [ -n "${2:-}" ]; then
      check_mode "$2"
      stop_pooler "$2"
    else
      # Nothing to stop where no cluster was ever started.
      [ -f "$(cluster_home)/port" ] || exit 0
      for m in $MODES; do stop_pooler "$m"; done
    fi
    ;;
  status) check_mode "${2:-}"; pooler_running "$2" ;;
  install) pgbouncer_installed ;;
  *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
