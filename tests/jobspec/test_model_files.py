"""``shunter.jobspec.model_files``: config.json and len(tokenizer) with the stdlib alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shunter.jobspec.model_files import read_config, tokenizer_size
from tests.e2e.harness import MINILM_DIR


def test_tokenizer_size_is_len_of_the_loaded_tokenizer(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(MINILM_DIR))
    assert tokenizer_size(MINILM_DIR) == len(tok) == 30522
    # Added and special tokens count once each: <x>, zzqx, <y>, </s> are new; [PAD] and
    # hello are in the vocabulary already.
    tok.add_tokens(["<x>", "[PAD]", "hello", "zzqx"])
    tok.add_special_tokens({"additional_special_tokens": ["<y>"], "eos_token": "</s>"})
    tok.save_pretrained(str(tmp_path))
    reloaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert tokenizer_size(tmp_path) == len(reloaded) == 30522 + 4


def test_missing_or_odd_files_are_unknown(tmp_path: Path) -> None:
    assert tokenizer_size(tmp_path) is None and read_config(tmp_path) is None
    (tmp_path / "tokenizer.json").write_text('{"model": {"vocab": 3}}')
    (tmp_path / "config.json").write_text("[1, 2]")
    assert tokenizer_size(tmp_path) is None and read_config(tmp_path) is None
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert read_config(tmp_path) == {"model_type": "bert"}


def test_counting_loads_no_heavy_package() -> None:
    """The light package counts parameters without torch, transformers or peft."""
    code = (
        "import sys\n"
        "from shunter.jobspec.param_count import count_params, trainable_params\n"
        "from shunter.jobspec.spec_counts import local_counts\n"
        "from shunter.jobspec.spec import LoraSpec\n"
        "c = {'model_type': 'llama', 'hidden_size': 8, 'intermediate_size': 8,\n"
        "     'num_hidden_layers': 1, 'num_attention_heads': 2, 'vocab_size': 10}\n"
        "assert count_params(c) > 0 and trainable_params(c, lora=LoraSpec(r=1)) > 0\n"
        "bad = {'torch', 'transformers', 'peft', 'ray', 'fastapi'} & set(sys.modules)\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
