#!/usr/bin/env bash
# Stop local test services. Usage: services/stop.sh [NAME...] (default: every services/NAME.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
names=("$@")
if ((!$#)); then
  for script in "$here"/*.sh; do
    name=$(basename "$script" .sh)
    [[ $name =~ ^(lib|start|stop)$ ]] || names+=("$name")
  done
fi
rc=0
for name in "${names[@]}"; do "$here/$name.sh" stop || rc=1; done
if ((!$#)); then  # the Connect servers of other lines that ./dev test --spark LINE started
  for dir in "$here"/../.services/spark-connect-*; do
    [[ -d $dir ]] || continue
    SESSIONIZE_SPARK_LINE=${dir##*-} "$here/lines/spark-connect.sh" stop || rc=1
  done
fi
exit $rc
