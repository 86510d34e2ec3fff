# Shared helpers for services/NAME.sh; the convention is in services/README.md.
# A service script sets NAME and PORT, defines svc_install, svc_start, svc_pid and svc_env
# (svc_stop optional), sources this file, then calls `service_main "$@"`.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
STATE_DIR=$REPO_ROOT/.services # gitignored: data, logs, pid files, npm packages
START_TIMEOUT=${SESSIONIZE_START_TIMEOUT:-60}
STOP_TIMEOUT=${SESSIONIZE_STOP_TIMEOUT:-30}

log() { echo "$NAME: $*" >&2; }
die() { log "error: $*"; exit 1; }

# Print the last lines of a log file to stderr, to explain a failed start.
log_tail() { [[ -f $1 ]] && { log "last lines of $1:"; tail -n 25 "$1" >&2; }; return 0; }

# apt_install PKG...: install Debian packages. `apt-get update` runs at most once an hour
# (marker file), so start.sh installing several services updates the lists once.
apt_install() {
  local sudo=() marker=$STATE_DIR/.apt-updated
  ((EUID == 0)) || sudo=(sudo)
  mkdir -p "$STATE_DIR"
  if [[ -z $(find "$marker" -mmin -60 2>/dev/null) ]]; then
    log "apt-get update"
    "${sudo[@]}" apt-get -qq -o DPkg::Lock::Timeout=300 update && touch "$marker"
  fi
  log "apt-get install $*"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=300 \
    install -y --no-install-recommends "$@" >/dev/null
}

# npm_install PKG VERSION: install an npm package into .services/npm/PKG (never global; one
# prefix per package so that installing one never prunes another). No-op when present.
npm_install() {
  local prefix=$STATE_DIR/npm/$1
  if [[ -f $prefix/node_modules/$1/package.json ]] &&
    grep -q "\"version\": \"$2\"" "$prefix/node_modules/$1/package.json"; then
    return 0
  fi
  command -v npm >/dev/null || apt_install nodejs npm
  log "npm install $1@$2 into ${prefix#"$REPO_ROOT"/}"
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-audit --no-fund --update-notifier=false --loglevel=error \
    "$1@$2" >&2
}

# pid_alive PID PATTERN: the process exists and its command line contains PATTERN (make it
# specific, e.g. the data dir: guards against a stale pid file whose pid was reused, and
# against another clone's server). Arguments are NUL-separated: match within one of them.
pid_alive() { [[ $1 =~ ^[0-9]+$ ]] && grep -qaF -- "$2" "/proc/$1/cmdline" 2>/dev/null; }

# pid_running PID: one of the process's threads is alive (not a zombie). pid 1 here may reap
# exited daemons late, and kill -0 succeeds on a zombie; and a main thread that has exited
# shows as a zombie while other threads (node's LevelDB workers, say) still hold its
# listening socket open.
pid_running() {
  local task
  for task in /proc/"$1"/task/*/stat; do
    [[ $(sed 's/.*) //' "$task" 2>/dev/null | cut -c1) =~ ^[^ZX]$ ]] && return 0
  done
  return 1
}

# port_open PORT: something accepts connections on 127.0.0.1:PORT.
port_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null; }

# wait_reaped PID: wait (at most STOP_TIMEOUT) while PID is a zombie, i.e. exited but not yet
# reaped by pid 1: a server that checks its old pid file would take it for a live process.
wait_reaped() {
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while [[ $1 =~ ^[0-9]+$ && -e /proc/$1 ]] && ! pid_running "$1" && ((SECONDS < deadline)); do
    sleep 0.1
  done
}

# spawn PIDFILE LOG CMD...: run CMD detached (own session, stdin closed, output appended to
# LOG, lock fd 9 closed so the server never holds our lock) and record its pid.
spawn() {
  local pidfile=$1 logfile=$2; shift 2
  setsid "$@" </dev/null >>"$logfile" 2>&1 9>&- &
  echo $! >"$pidfile"
}

# wait_ready PID LOG CMD...: poll CMD until it succeeds; CMD must give up within seconds (use
# `timeout`: a foreign listener may accept and never answer). Fails with the log tail if the
# process PID exits first or START_TIMEOUT seconds pass.
wait_ready() {
  local pid=$1 logfile=$2 deadline=$((SECONDS + START_TIMEOUT)); shift 2
  until "$@" >/dev/null 2>&1; do
    if ! pid_running "$pid"; then
      log_tail "$logfile"; die "server exited during start-up"
    fi
    if ((SECONDS >= deadline)); then
      log_tail "$logfile"; die "not accepting connections after ${START_TIMEOUT}s"
    fi
    sleep 0.1
  done
}

# stop_pid PID: SIGTERM, wait for exit; SIGKILL after STOP_TIMEOUT seconds.
stop_pid() {
  local deadline=$((SECONDS + STOP_TIMEOUT))
  kill -TERM "$1" 2>/dev/null || return 0
  while pid_running "$1"; do
    if ((SECONDS >= deadline)); then
      log "no exit after ${STOP_TIMEOUT}s, sending SIGKILL"; kill -KILL "$1" 2>/dev/null || true
    fi
    sleep 0.1
  done
}

# http_ready PORT: something on 127.0.0.1:PORT answers an HTTP request (no curl needed).
http_ready() {
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" &&
    printf "GET / HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && head -c 5 <&3 | grep -q "^HTTP/"' "$1"
}

# port_owner PORT: who listens on 127.0.0.1:PORT, for the error message.
port_owner() {
  local who
  who=$(ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'users:.*' | head -1)
  echo "${who:-unknown} (see: ss -ltnp 'sport = :$1')"
}

running_line() { echo "$NAME: running on 127.0.0.1:$PORT (pid $1, dir ${DIR#"$REPO_ROOT"/})"; }

# What a service sets up in a running server (optional svc_ready): run by every `start`, also
# when the server runs already, so that a change of it reaches servers started before it.
svc_settle() { if declare -F svc_ready >/dev/null; then svc_ready; fi; }

# service_main ACTION: dispatch {install|start|stop|status|env}. install/start/stop hold an
# exclusive lock on .services/NAME/.lock so that concurrent callers do not race.
service_main() {
  DIR=$STATE_DIR/$NAME
  local pid
  if [[ ${1:-} =~ ^(install|start|stop)$ ]]; then
    mkdir -p "$DIR"
    exec 9>"$DIR/.lock"
    flock -w $((START_TIMEOUT + STOP_TIMEOUT + 600)) 9 || die "could not lock $DIR/.lock"
  fi
  case ${1:-} in
    install) svc_install ;;
    start)
      if pid=$(svc_pid); then svc_settle; running_line "$pid"; return 0; fi
      if port_open "$PORT"; then
        die "port $PORT is taken by another process: $(port_owner "$PORT")"
      fi
      svc_start
      pid=$(svc_pid) || die "started but no server process found"
      svc_settle
      running_line "$pid" ;;
    stop)
      if pid=$(svc_pid); then
        if declare -F svc_stop >/dev/null; then svc_stop "$pid"; else stop_pid "$pid"; fi
        local deadline=$((SECONDS + STOP_TIMEOUT)) # stopped means the port is free again
        while port_open "$PORT" && ((SECONDS < deadline)); do sleep 0.1; done
        port_open "$PORT" && die "stopped, but port $PORT still answers: $(port_owner "$PORT")"
        echo "$NAME: stopped"
      else
        echo "$NAME: not running"
      fi ;;
    status)
      if pid=$(svc_pid); then running_line "$pid"; else echo "$NAME: stopped"; return 1; fi ;;
    env) svc_env ;;
    *) echo "usage: $0 {install|start|stop|status|env}" >&2; return 2 ;;
  esac
}
