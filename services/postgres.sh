#!/usr/bin/env bash
# PostgreSQL 15 (Debian's postgresql-15) on 127.0.0.1:25432 for tests: database and superuser
# role `sessionize`, trust authentication (no password) except for the members of the group
# role `sessionize_password` (scram-sha-256: the credential tests' roles, whose wrong
# password must fail), TCP only (no Unix socket), fsync off
# (data survives stop/start and a server crash, not a machine crash). Data and log in
# .services/postgres/. Usage: postgres.sh {install|start|stop|status|env}
set -euo pipefail
NAME=postgres
PORT=${SESSIONIZE_POSTGRES_PORT:-25432}
PGBIN=/usr/lib/postgresql/15/bin
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

svc_install() {
  [[ -x $PGBIN/postgres && -x $PGBIN/psql ]] || apt_install postgresql-15 postgresql-client-15
}

# Run a server command as the `postgres` OS user when we are root (the server refuses root),
# from / so that an unreadable working directory does not matter.
as_pg() {
  if ((EUID == 0)); then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# The data dir is .services/postgres/data. When we are root and the postgres user cannot
# traverse the repository's path (a clone under /root, say), it is a symlink to a directory
# under /tmp/sessionize-services-<hash of the repo path>/ instead.
data_dir() {
  local d=$DIR/data target
  [[ -L $d && ! -d $d ]] && rm "$d" # dangling symlink: /tmp was cleaned
  if [[ ! -d $d ]]; then
    if ((EUID != 0)); then
      install -d -m 700 "$d"
    elif runuser -u postgres -- test -x "$DIR"; then
      install -d -m 700 -o postgres -g postgres "$d"
    else
      target=/tmp/sessionize-services-$(cksum <<<"$REPO_ROOT" | cut -d' ' -f1)/postgres
      rm -rf "$target" # no data dir here means a fresh cluster, even if /tmp has an old one
      install -d -m 755 "${target%/*}" && install -d -m 700 -o postgres -g postgres "$target"
      ln -s "$target" "$d"
    fi
  fi
  readlink -f "$d" # the real path: postgres may not be able to traverse the symlink's
}

svc_pid() {
  local pid
  pid=$(head -n1 "$DIR/data/postmaster.pid" 2>/dev/null) &&
    pid_alive "$pid" "$(readlink -f "$DIR/data")" && echo "$pid"
}

psql_() {
  PGCONNECT_TIMEOUT=10 "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$PORT" -U sessionize \
    -v ON_ERROR_STOP=1 "$@"
}

svc_start() {
  [[ -x $PGBIN/postgres ]] || die "PostgreSQL 15 not installed: run $0 install"
  local data
  data=$(data_dir)
  if [[ ! -f $data/PG_VERSION ]]; then
    log "initdb $data"
    as_pg "$PGBIN/initdb" -D "$data" -U sessionize --auth=trust -E UTF8 --locale=C \
      --no-instructions --no-sync >>"$DIR/postgres.log" 2>&1 ||
      { log_tail "$DIR/postgres.log"; die "initdb failed"; }
    as_pg tee -a "$data/postgresql.conf" >/dev/null <<'CONF'
# sessionize test server (services/postgres.sh)
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
fsync = off
max_connections = 200
CONF
  fi
  # After a kill -9, postgres refuses to start while the old postmaster is an unreaped zombie.
  wait_reaped "$(head -n1 "$data/postmaster.pid" 2>/dev/null || true)"
  # The server's output goes to pg_ctl's stdout: our log file, opened by root.
  as_pg "$PGBIN/pg_ctl" start -D "$data" -o "-p $PORT" -w -t "$START_TIMEOUT" -s \
    >>"$DIR/postgres.log" 2>&1 9>&- || { log_tail "$DIR/postgres.log"; die "server did not start"; }
  [[ -n $(psql_ -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'sessionize'") ]] ||
    psql_ -d postgres -c "CREATE DATABASE sessionize"
  psql_ -d sessionize -c "SELECT 1" >/dev/null
}

# Members of `sessionize_password` log in with their password; the rule goes first in
# pg_hba.conf (the first matching line decides) and a reload applies it: no restart, and
# no other role's authentication changes.
PASSWORD_RULE="host all +sessionize_password 127.0.0.1/32 scram-sha-256"
svc_ready() {
  local hba
  hba=$(readlink -f "$DIR/data")/pg_hba.conf
  psql_ -d postgres -c "DO \$\$ BEGIN CREATE ROLE sessionize_password NOLOGIN;
    EXCEPTION WHEN duplicate_object THEN NULL; END \$\$" >/dev/null
  if ! as_pg grep -qxF "$PASSWORD_RULE" "$hba"; then
    as_pg sed -i "1i $PASSWORD_RULE" "$hba"
    psql_ -d postgres -tAc "SELECT pg_reload_conf()" >/dev/null
  fi
}

svc_stop() {
  as_pg "$PGBIN/pg_ctl" stop -D "$(readlink -f "$DIR/data")" -m fast -w -t "$STOP_TIMEOUT" -s
}

svc_env() {
  echo "export SESSIONIZE_TEST_POSTGRES=postgresql://sessionize@127.0.0.1:$PORT/sessionize"
}

service_main "$@"
