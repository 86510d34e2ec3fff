#!/usr/bin/env bash
# Debian's chromium, the browser the report test renders the HTML report in (headless). No
# server: `start` and `stop` only say so; `status` succeeds when the browser is installed, so
# that start.sh puts SESSIONIZE_CHROMIUM into .services/env.sh.
# Usage: chromium.sh {install|start|stop|status|env}
set -euo pipefail
NAME=chromium
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BIN=${SESSIONIZE_CHROMIUM:-/usr/bin/chromium}

installed() { [[ -x $BIN ]]; }

version() { "$BIN" --version 2>/dev/null | head -1; }

case ${1:-} in
  install) installed || apt_install chromium ;;
  start)
    installed || die "not installed: run $0 install"
    echo "$NAME: installed at $BIN ($(version)); a browser, nothing to start" ;;
  stop) echo "$NAME: nothing to stop" ;;
  status)
    if installed; then echo "$NAME: installed at $BIN ($(version))"; else
      echo "$NAME: not installed"; exit 1; fi ;;
  env) echo "export SESSIONIZE_CHROMIUM=$BIN" ;;
  *) echo "usage: $0 {install|start|stop|status|env}" >&2; exit 2 ;;
esac
