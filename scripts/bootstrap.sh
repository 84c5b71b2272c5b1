#!/usr/bin/env bash
# Create .venv and install everything the project needs. Idempotent: a stamp keyed on
# pyproject.toml skips the slow part when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
stamp="$VENV/.shunter-installed"
want=$(sha256sum pyproject.toml scripts/bootstrap.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/pip" install -q --upgrade pip setuptools wheel
  # torch first and pinned: a range would pull several GB of CUDA wheels.
  "$VENV/bin/pip" install -q "torch==2.13.0"
  # DeepSpeed builds from source; no optional ops, and no build isolation so its
  # build environment reuses our torch instead of downloading another.
  DS_BUILD_OPS=0 "$VENV/bin/pip" install -q --no-build-isolation "deepspeed==0.19.8"
  DS_BUILD_OPS=0 "$VENV/bin/pip" install -q -e ".[server,train,tracking,dev]"
  echo "$want" > "$stamp"
fi
if [ "${1:-}" = "--browser" ] && ! [ -x /usr/bin/chromium ]; then
  # Browser tests drive Debian's Chromium (no browser downloads at run time).
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  elif [ -n "${CI:-}" ]; then
    echo "error: /usr/bin/chromium missing and cannot be installed (not root / no apt-get); CI runs the browser tests" >&2
    exit 1
  else
    echo "note: /usr/bin/chromium missing; browser tests will skip (they fail when CI is set)" >&2
  fi
fi
