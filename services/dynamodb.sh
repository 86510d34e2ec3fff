#!/usr/bin/env bash
# A DynamoDB-API server for tests: dynalite (npm, LevelDB store) on 127.0.0.1:28000, run by
# node; tables become ACTIVE at once. Any credentials and region are accepted: the env line
# exports dummy ones. Data (survives stop/start) and log in .services/dynamodb/.
# Usage: dynamodb.sh {install|start|stop|status|env}
set -euo pipefail
NAME=dynamodb
PORT=${SESSIONIZE_DYNAMODB_PORT:-28000}
VERSION=4.0.0 # needs node >= 20
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CLI=$STATE_DIR/npm/dynalite/node_modules/dynalite/cli.js

svc_install() {
  command -v node >/dev/null || apt_install nodejs npm
  npm_install dynalite "$VERSION"
}

svc_pid() {
  local pid
  pid=$(cat "$DIR/dynalite.pid" 2>/dev/null) && pid_alive "$pid" "$DIR/data" && echo "$pid"
}

svc_start() {
  [[ -f $CLI ]] || die "dynalite not installed: run $0 install"
  mkdir -p "$DIR/data"
  spawn "$DIR/dynalite.pid" "$DIR/dynalite.log" node --require "$REPO_ROOT/services/dynalite-guard.js" "$CLI" --host 127.0.0.1 --port "$PORT" \
    --path "$DIR/data" --createTableMs 0 --deleteTableMs 0 --updateTableMs 0
  wait_ready "$(cat "$DIR/dynalite.pid")" "$DIR/dynalite.log" http_ready "$PORT"
}

svc_env() {
  echo "export SESSIONIZE_TEST_DYNAMODB=http://127.0.0.1:$PORT"
  # Dummy credentials and region: dynalite accepts any, boto3 insists on having some.
  echo "export AWS_ACCESS_KEY_ID=sessionize-local AWS_SECRET_ACCESS_KEY=sessionize-local"
  echo "export AWS_DEFAULT_REGION=us-east-1"
}

service_main "$@"
