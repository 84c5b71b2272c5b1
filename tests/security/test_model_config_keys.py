"""The table of config keys ``config_overrides`` may set is generated from transformers; a
new transformers (a new model type or field) makes it stale, and this test says so."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs [train]")
def test_model_config_keys_table_is_current() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import gen_model_config_keys as gen
    finally:
        sys.path.pop(0)
    fresh = gen.render(gen.build_table())
    stored = (REPO / "shunter" / "jobspec" / "model_config_keys.json").read_text()
    assert stored == fresh, "stale: run .venv/bin/python scripts/gen_model_config_keys.py"


def test_table_covers_common_models_and_no_loader_args() -> None:
    from shunter.jobspec.safety import LOADER_ARGS, model_config_keys

    for model_type in ("bert", "gpt2", "llama", "t5", "roberta"):
        keys = model_config_keys(model_type)
        assert keys is not None and "vocab_size" in keys
    assert model_config_keys("no-such-model") is None
    every = model_config_keys(None)
    assert every is not None and "trust_remote_code" not in every
    assert "trust_remote_code" in LOADER_ARGS and "revision" in LOADER_ARGS
