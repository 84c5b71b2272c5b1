"""Regenerate ``shunter/jobspec/model_config_keys.json`` from the installed transformers.

The table lists, per ``model_type``, the keyword arguments of that model's own
``PretrainedConfig`` subclass: the only keys ``model.config_overrides`` may set. The service
cannot import transformers (import contract), so it reads this file instead.
``tests/security/test_model_config_keys.py`` regenerates it and fails when it is stale.

Usage: ``.venv/bin/python scripts/gen_model_config_keys.py [--check]``
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "shunter" / "jobspec" / "model_config_keys.json"


def build_table() -> dict[str, Any]:
    import transformers
    from transformers import PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    def params(cls: type) -> set[str]:
        sig = inspect.signature(cls.__init__)  # type: ignore[misc]
        skip = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
        return {n for n, p in sig.parameters.items() if p.kind not in skip and n != "self"}

    common = params(PretrainedConfig)
    types: dict[str, str] = {}
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        own = params(CONFIG_MAPPING[model_type]) - common
        types[model_type] = " ".join(sorted(own))
    return {
        "transformers_version": transformers.__version__,
        "common": sorted(common),
        "model_types": types,
    }


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=0, sort_keys=True) + "\n"


def main() -> int:
    text = render(build_table())
    if "--check" in sys.argv[1:]:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale: run scripts/gen_model_config_keys.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
