#!/usr/bin/env bash
# Install and start local test services, then write .services/env.sh with the `env` lines of
# every service that is running. Usage: services/start.sh [NAME...] (default: every
# services/NAME.sh). Goes on past a failed service; exits 1 if any failed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
all=()
for script in "$here"/*.sh; do
  name=$(basename "$script" .sh)
  [[ $name =~ ^(lib|start|stop)$ ]] || all+=("$name")
done
(($#)) && names=("$@") || names=("${all[@]}")

failed=()
for name in "${names[@]}"; do
  if [[ ! -x $here/$name.sh ]]; then
    echo "start.sh: no such service: $name" >&2; failed+=("$name"); continue
  fi
  "$here/$name.sh" install && "$here/$name.sh" start || failed+=("$name")
done

env_file=$(dirname "$here")/.services/env.sh
mkdir -p "${env_file%/*}"
tmp=$(mktemp "$env_file.XXXXXX")
{
  echo "# Written by services/start.sh: source it to reach the local test services."
  for name in "${all[@]}"; do
    if "$here/$name.sh" status >/dev/null 2>&1; then "$here/$name.sh" env; fi
  done
} | awk '!seen[$0]++' >"$tmp" # AWS_* lines are shared by services
chmod 644 "$tmp" && mv "$tmp" "$env_file"
echo "start.sh: wrote .services/env.sh (source it)"
((${#failed[@]} == 0)) || { echo "start.sh: failed: ${failed[*]}" >&2; exit 1; }
