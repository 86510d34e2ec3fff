#!/usr/bin/env bash
# A Spark Connect server of another PySpark line, for `./dev test --spark LINE`: run from that
# line's venv (.venv-sparkLINE) in local[2] mode (the standalone cluster of spark-cluster.sh
# runs the default line, whose master and workers another line's driver cannot use), on
# 127.0.0.1:27100+10*(MAJOR-3)+MINOR (4.0: 27110, 4.1: 27111, 4.2: 27112). Its Python runs
# the line's interpreter with this checkout's src/ first on PYTHONPATH. PySpark 3.5's pip
# package has no Connect server jar (spark-connect_2.12 comes from Maven, which these scripts
# never download), so 3.5 has none here. Not among services/*.sh: started only by
# ./dev test --spark LINE. Usage: SESSIONIZE_SPARK_LINE=4.0 spark-connect.sh {install|start|
# stop|status|env}
set -euo pipefail
LINE=${SESSIONIZE_SPARK_LINE:?set SESSIONIZE_SPARK_LINE to the line, e.g. 4.0}
[[ $LINE =~ ^([0-9])\.([0-9])$ ]] || { echo "spark-connect.sh: no such line: $LINE" >&2; exit 2; }
NAME=spark-connect-$LINE
PORT=$((27100 + BASH_REMATCH[2] + 10 * (BASH_REMATCH[1] - 3)))
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
START_TIMEOUT=${SESSIONIZE_START_TIMEOUT:-120}
PYTHON=$REPO_ROOT/.venv-spark$LINE/bin/python

spark_home() { "$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'; }

svc_install() {
  [[ -x $PYTHON ]] || die "no Python at $PYTHON: run ./dev setup --dev --spark $LINE first"
  "$PYTHON" -c 'import grpc, grpc_status, google.rpc, zstandard' 2>/dev/null ||
    die "pyspark[connect] is not installed in $PYTHON: run ./dev setup --dev --spark $LINE"
  compgen -G "$(spark_home)/jars/spark-connect_*.jar" >/dev/null ||
    die "PySpark $LINE's package has no Spark Connect server jar: no Connect server on $LINE here"
}

svc_pid() {
  local pid
  pid=$(cat "$DIR/server.pid" 2>/dev/null) &&
    pid_alive "$pid" "spark.connect.grpc.binding.port=$PORT" && pid_running "$pid" && echo "$pid"
}

svc_start() {
  svc_install
  local home
  home=$(spark_home)
  mkdir -p "$DIR"
  # What sbin/start-connect-server.sh runs (4.0's package lacks the script, not the class).
  (cd "$DIR" && spawn "$DIR/server.pid" "$DIR/server.log" env SPARK_HOME="$home" \
    SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PYTHON" PYSPARK_DRIVER_PYTHON="$PYTHON" \
    PYTHONPATH="$REPO_ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "$home/bin/spark-submit" \
    --class org.apache.spark.sql.connect.service.SparkConnectServer \
    --name "Spark Connect server $LINE" --master 'local[2]' \
    --conf spark.connect.grpc.binding.address=127.0.0.1 \
    --conf spark.connect.grpc.binding.port="$PORT" \
    --conf spark.ui.enabled=false --conf spark.driver.memory=1g \
    --conf spark.sql.session.timeZone=UTC spark-internal)
  wait_ready "$(cat "$DIR/server.pid")" "$DIR/server.log" port_open "$PORT"
}

svc_stop() {
  # Spawned in its own session: the group holds spark-submit's shell and the JVM.
  kill -TERM -- "-$1" 2>/dev/null || true
  stop_pid "$1"
  kill -KILL -- "-$1" 2>/dev/null || true
}

svc_env() { echo "export SESSIONIZE_TEST_SPARK_REMOTE=sc://127.0.0.1:$PORT"; }

service_main "$@"
