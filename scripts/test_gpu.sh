#!/usr/bin/env bash
# `make test-gpu`: the GPU set (tests/gpu) on this node's own torch/transformers/peft.
#
# PYTHON (default: python3) is whatever Python the node has. The project goes in with
# --no-deps so the node's torch/transformers/peft (and DeepSpeed, if installed) are used as
# they are; the light pure-Python pieces trainer_core imports (pydantic, pyyaml) and pytest
# are installed only when missing (WHEELS=dir: install them from local wheels, offline).
# --noconftest: tests/gpu needs no fixtures from tests/conftest.py (server/Ray fixtures).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"

"$PY" - <<'PYEOF'
import importlib.util, sys
missing = [m for m in ("torch", "transformers", "peft") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"test-gpu: this Python lacks {', '.join(missing)}; install them (any recent version) first")
PYEOF

need=()
for mod in pydantic yaml pytest; do
  "$PY" -c "import $mod" 2>/dev/null || need+=("$([ "$mod" = yaml ] && echo pyyaml || echo "$mod")")
done
pip_args=(-q)
[ -n "${WHEELS:-}" ] && pip_args+=(--no-index --find-links "$WHEELS")
if [ "${#need[@]}" -gt 0 ]; then
  echo "test-gpu: installing missing ${need[*]}"
  "$PY" -m pip install "${pip_args[@]}" "${need[@]}"
fi
# --no-build-isolation: the node may be offline; setuptools is then taken from the node.
if ! "$PY" -m pip install "${pip_args[@]}" --no-deps --no-build-isolation -e . 2>/tmp/shunter-test-gpu-pip.log; then
  echo "test-gpu: pip install --no-deps -e . failed (see /tmp/shunter-test-gpu-pip.log); running from the checkout"
fi

"$PY" - <<'PYEOF'
import importlib, platform, torch
def v(m):
    try:
        return importlib.import_module(m).__version__
    except ImportError:
        return "not installed"
cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
print(f"test-gpu: python {platform.python_version()}, torch {torch.__version__} "
      f"(CUDA {torch.version.cuda}), transformers {v('transformers')}, peft {v('peft')}, "
      f"deepspeed {v('deepspeed')}; device: {cuda}")
PYEOF

exec env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -m gpu --noconftest \
  -p no:cacheprovider -q -rs --durations=20 tests/gpu "$@"
