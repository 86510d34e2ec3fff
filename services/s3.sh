#!/usr/bin/env bash
# An S3-API server for tests: moto's server (moto[server] from PyPI) on 127.0.0.1:29900,
# installed into its own venv under .services/pypi/moto. moto keeps objects in memory;
# s3_server.py beside this script saves them to .services/s3/data/s3.pickle on a clean stop
# and loads them at start. Every request is logged (one line each) to .services/s3/s3.log.
# Any credentials are accepted; the exported ones are dummies for this server only.
# Usage: s3.sh {install|start|stop|status|env}
set -euo pipefail
NAME=s3
PORT=${SESSIONIZE_S3_PORT:-29900}
VERSION=5.2.5
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV=$STATE_DIR/pypi/moto
LAUNCHER=$REPO_ROOT/services/s3_server.py

svc_install() {
  local dist
  for dist in "$VENV"/lib/python3*/site-packages/moto-"$VERSION".dist-info; do
    [[ -d $dist ]] && return 0
  done
  command -v python3 >/dev/null || apt_install python3 python3-venv
  log "pip install moto[server]==$VERSION into ${VENV#"$REPO_ROOT"/}"
  [[ -x $VENV/bin/pip ]] || python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check "moto[server]==$VERSION" >&2
}

svc_pid() {
  local pid
  pid=$(cat "$DIR/s3.pid" 2>/dev/null) && pid_alive "$pid" "$DIR/data" && pid_running "$pid" &&
    echo "$pid"
}

svc_start() {
  [[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c "import moto.server" 2>/dev/null ||
    die "moto not installed: run $0 install"
  mkdir -p "$DIR/data"
  spawn "$DIR/s3.pid" "$DIR/s3.log" "$VENV/bin/python" "$LAUNCHER" 127.0.0.1 "$PORT" "$DIR/data"
  wait_ready "$(cat "$DIR/s3.pid")" "$DIR/s3.log" http_ready "$PORT"
}

svc_env() {
  echo "export SESSIONIZE_TEST_S3=http://127.0.0.1:$PORT"
  # The same dummy credentials as dynamodb.sh: start.sh writes both into one env file.
  echo "export AWS_ACCESS_KEY_ID=sessionize-local AWS_SECRET_ACCESS_KEY=sessionize-local"
  echo "export AWS_DEFAULT_REGION=us-east-1"
}

service_main "$@"
