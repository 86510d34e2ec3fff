#!/usr/bin/env bash
# A Kinesis-API server for tests: kinesalite (npm, LevelDB store) on 127.0.0.1:24567, run by
# node; streams become ACTIVE after 50 ms. Any credentials and region are accepted: the env
# line exports dummy ones. Data (survives stop/start) and log in .services/kinesis/.
# kinesalite's own command line binds every interface, so a two-line launcher binds 127.0.0.1.
# Known gaps of kinesalite: no UpdateShardCount (use SplitShard/MergeShards), and
# GetShardIterator AT_TIMESTAMP never answers when no record is that recent.
# Usage: kinesis.sh {install|start|stop|status|env}
set -euo pipefail
NAME=kinesis
PORT=${SESSIONIZE_KINESIS_PORT:-24567}
VERSION=3.3.3
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MODULE=$STATE_DIR/npm/kinesalite/node_modules/kinesalite

svc_install() {
  command -v node >/dev/null || apt_install nodejs npm
  npm_install kinesalite "$VERSION"
}

svc_pid() {
  local pid
  pid=$(cat "$DIR/kinesalite.pid" 2>/dev/null) && pid_alive "$pid" kinesalite && echo "$pid"
}

svc_start() {
  [[ -f $MODULE/package.json ]] || die "kinesalite not installed: run $0 install"
  mkdir -p "$DIR/data"
  # argv: module, port, data dir; the last argument also makes "kinesalite" visible in the
  # command line for pid_alive.
  spawn "$DIR/kinesalite.pid" "$DIR/kinesalite.log" node -e '
    const [mod, port, path] = process.argv.slice(1);
    const server = require(mod)({path, createStreamMs: 50, deleteStreamMs: 50,
                                 updateStreamMs: 50, shardLimit: 200});
    server.listen(+port, "127.0.0.1", () => console.log("kinesalite listening on", port));
  ' "$MODULE" "$PORT" "$DIR/data" kinesalite
  wait_ready "$(cat "$DIR/kinesalite.pid")" "$DIR/kinesalite.log" http_ready "$PORT"
}

svc_env() {
  echo "export SESSIONIZE_TEST_KINESIS=http://127.0.0.1:$PORT"
  # Dummy credentials and region: kinesalite accepts any, boto3 insists on having some.
  echo "export AWS_ACCESS_KEY_ID=sessionize-local AWS_SECRET_ACCESS_KEY=sessionize-local"
  echo "export AWS_DEFAULT_REGION=us-east-1"
}

service_main "$@"
