#!/usr/bin/env bash
# A Spark standalone cluster on 127.0.0.1 for tests: a master (port 27077, web UI 27080, REST
# 27066), two workers of one core and 1 GiB each (ports 27091/27092, web UIs 27081/27082, own
# work dirs), and a Spark Connect server over the cluster (gRPC 27015). All run from the
# project venv's pyspark wheel (no download). Executors and the Connect server's Python run
# the venv's interpreter with this checkout's src/ first on PYTHONPATH, so that tasks and the
# server-side foreachBatch import this checkout's sessionize. The Connect server allocates
# executors dynamically and gives them back after 10 s idle, so that applications started
# with --master spark://... get the two cores too. Logs, pids and work dirs in
# .services/spark-cluster/. Usage: spark-cluster.sh {install|start|stop|status|env}
set -euo pipefail
NAME=spark-cluster
MASTER_PORT=${SESSIONIZE_SPARK_CLUSTER_PORT:-27077}
CONNECT_PORT=${SESSIONIZE_SPARK_CONNECT_PORT:-27015}
UI_PORT=$((MASTER_PORT + 3))  # 27080
REST_PORT=$((MASTER_PORT - 11))  # 27066
# lib.sh's free-port check and stopped-means-free wait: the last process started.
PORT=$CONNECT_PORT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Four JVMs on a shared machine: slower to come up than one server.
START_TIMEOUT=${SESSIONIZE_START_TIMEOUT:-120}
DIR=$STATE_DIR/$NAME
PYTHON=${SESSIONIZE_SPARK_CLUSTER_PYTHON:-$REPO_ROOT/.venv/bin/python}
MASTER_URL=spark://127.0.0.1:$MASTER_PORT
WORKERS=(1 2)

spark_home() { "$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'; }

svc_install() {
  [[ -x $PYTHON ]] || die "no Python at $PYTHON: run ./dev setup first"
  # pyspark[connect]'s extras come with the project's dev extras (pyproject.toml).
  "$PYTHON" -c 'import pyspark, grpc, grpc_status, google.rpc, zstandard' 2>/dev/null ||
    die "pyspark[connect] is not installed in $PYTHON: run ./dev setup"
  command -v java >/dev/null || [[ -n ${JAVA_HOME:-} ]] || apt_install openjdk-17-jre-headless
}

# pid_of NAME PATTERN: the recorded pid of one process of the cluster, if alive.
pid_of() {
  local pid
  pid=$(cat "$DIR/$1.pid" 2>/dev/null) && pid_alive "$pid" "$2" && pid_running "$pid" &&
    echo "$pid"
}
# The JVMs have SPARK_CONF_DIR on their class path; the Connect server's launcher, its port.
master_pid() { pid_of master "$DIR/conf"; }
worker_pid() { pid_of "worker$1" "$DIR/work$1"; }
connect_pid() { pid_of connect "spark.connect.grpc.binding.port=$CONNECT_PORT"; }

svc_pid() {
  local pid i
  pid=$(master_pid) || return 1
  for i in "${WORKERS[@]}"; do worker_pid "$i" >/dev/null || return 1; done
  connect_pid >/dev/null || return 1
  echo "$pid"
}

# alive_workers: how many workers the master's /json/ lists as ALIVE.
alive_workers() {
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" &&
    printf "GET /json/ HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && cat <&3' "$UI_PORT" |
    grep -o '"state" *: *"ALIVE"' | wc -l
}
two_workers() { (($(alive_workers) >= ${#WORKERS[@]})); }

run_env() {
  RUN_ENV=(env SPARK_HOME="$SPARK_HOME" SPARK_LOCAL_IP=127.0.0.1 SPARK_CONF_DIR="$DIR/conf" \
    SPARK_LOG_DIR="$DIR/logs" SPARK_PID_DIR="$DIR" PYSPARK_PYTHON="$PYTHON" \
    PYSPARK_DRIVER_PYTHON="$PYTHON" PYTHONPATH="$REPO_ROOT/src${PYTHONPATH:+:$PYTHONPATH}" \
    SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=true -Dspark.master.rest.port=$REST_PORT")
}

svc_start() {
  "$PYTHON" -c 'import grpc' 2>/dev/null || die "not installed: run $0 install"
  SPARK_HOME=$(spark_home)
  mkdir -p "$DIR/conf" "$DIR/logs"
  run_env
  local class=org.apache.spark.deploy i
  if ! master_pid >/dev/null; then
    spawn "$DIR/master.pid" "$DIR/master.log" "${RUN_ENV[@]}" "$SPARK_HOME/bin/spark-class" \
      $class.master.Master --host 127.0.0.1 --port "$MASTER_PORT" --webui-port "$UI_PORT"
  fi
  for i in "${WORKERS[@]}"; do
    worker_pid "$i" >/dev/null && continue
    mkdir -p "$DIR/work$i"
    spawn "$DIR/worker$i.pid" "$DIR/worker$i.log" "${RUN_ENV[@]}" "$SPARK_HOME/bin/spark-class" \
      $class.worker.Worker --host 127.0.0.1 --port $((27090 + i)) --webui-port $((UI_PORT + i)) \
      --cores 1 --memory 1g --work-dir "$DIR/work$i" "$MASTER_URL"
  done
  wait_ready "$(cat "$DIR/master.pid")" "$DIR/master.log" two_workers
  # --wait: in the foreground (spawn keeps its pid; its process group is stopped as one).
  spawn "$DIR/connect.pid" "$DIR/connect.log" "${RUN_ENV[@]}" "$SPARK_HOME/sbin/start-connect-server.sh" \
    --wait --master "$MASTER_URL" \
    --conf spark.connect.grpc.binding.address=127.0.0.1 \
    --conf spark.connect.grpc.binding.port="$CONNECT_PORT" \
    --conf spark.ui.enabled=false --conf spark.driver.memory=1g \
    --conf spark.executor.memory=1g --conf spark.sql.session.timeZone=UTC \
    --conf spark.executorEnv.PYTHONPATH="$REPO_ROOT/src" \
    --conf spark.dynamicAllocation.enabled=true \
    --conf spark.dynamicAllocation.shuffleTracking.enabled=true \
    --conf spark.dynamicAllocation.shuffleTracking.timeout=10s \
    --conf spark.dynamicAllocation.executorIdleTimeout=10s \
    --conf spark.dynamicAllocation.cachedExecutorIdleTimeout=10s \
    --conf spark.dynamicAllocation.minExecutors=0
  wait_ready "$(cat "$DIR/connect.pid")" "$DIR/connect.log" port_open "$CONNECT_PORT"
}

svc_stop() {
  local pid
  for pid in "$(connect_pid)" "$(worker_pid 2)" "$(worker_pid 1)" "$(master_pid)"; do
    [[ -n $pid ]] || continue
    # Each was spawned in its own session: the group holds the JVM and its executors.
    kill -TERM -- "-$pid" 2>/dev/null || true
    stop_pid "$pid"
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
}

svc_env() {
  echo "export SESSIONIZE_TEST_SPARK_MASTER=$MASTER_URL"
  echo "export SESSIONIZE_TEST_SPARK_MASTER_UI=http://127.0.0.1:$UI_PORT"
  echo "export SESSIONIZE_TEST_SPARK_REMOTE=sc://127.0.0.1:$CONNECT_PORT"
}

# A cluster left half running (a worker killed, say) is stopped first, then started whole.
if [[ ${1:-} == start ]] && ! svc_pid >/dev/null &&
  { master_pid || connect_pid || worker_pid 1 || worker_pid 2; } >/dev/null; then
  "$0" stop >/dev/null
fi
service_main "$@"
