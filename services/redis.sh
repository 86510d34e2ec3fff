#!/usr/bin/env bash
# Redis 7 (Debian's redis-server) on 127.0.0.1:26379 for tests. Data (append-only file, so data
# survives stop/start and kill -9) and log in .services/redis/.
# Usage: redis.sh {install|start|stop|status|env}
set -euo pipefail
NAME=redis
PORT=${SESSIONIZE_REDIS_PORT:-26379}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

svc_install() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
    apt_install redis-server redis-tools
}

svc_pid() {
  local pid
  pid=$(cat "$DIR/redis.pid" 2>/dev/null) &&
    pid_alive "$pid" "redis-server 127.0.0.1:$PORT" && echo "$pid"
}

ping() { [[ $(timeout 2 redis-cli -h 127.0.0.1 -p "$PORT" ping) == PONG ]]; }

svc_start() {
  command -v redis-server >/dev/null || die "redis-server not installed: run $0 install"
  mkdir -p "$DIR/data"
  # Not daemonized: spawn records the real pid at once, so a failed bind is seen at once.
  spawn "$DIR/redis.pid" "$DIR/redis.log" redis-server --bind 127.0.0.1 --port "$PORT" \
    --dir "$DIR/data" --appendonly yes --appendfsync everysec --save "" --daemonize no
  wait_ready "$(cat "$DIR/redis.pid")" "$DIR/redis.log" ping
}

svc_env() { echo "export SESSIONIZE_TEST_REDIS=redis://127.0.0.1:$PORT/0"; }

service_main "$@"
