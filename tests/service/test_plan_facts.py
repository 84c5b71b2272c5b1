"""``service.jobs.plan_facts``: parameter counts from a config alone, train rows of local files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.jobs.plan_facts import param_counts, train_rows
from shunter.jobspec import validate

# Llama, hidden 48, MLP 96, 2 layers, 6 heads of 8, 2 key/value heads, vocab 128, no biases.
_TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 48,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "vocab_size": 128,
}
H, INTER, LAYERS, KV, V = 48, 96, 2, 16, 128
PER_LAYER = H * H * 2 + H * KV * 2 + 3 * H * INTER + 2 * H  # q,o + k,v + MLP + 2 norms
TINY_LLAMA_PARAMS = V * H + LAYERS * PER_LAYER + H + V * H  # embed, layers, norm, lm_head
# LoRA r=4 on peft's Llama default targets q_proj (48->48) and v_proj (48->16).
TINY_LLAMA_LORA = LAYERS * 4 * ((H + H) + (H + KV))


def spec(**model: Any) -> Any:
    return validate(
        {
            "name": "facts",
            "model": {"task": "causal-lm", **model},
            "data": {"train": "train.jsonl"},
        }
    )


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_TINY_LLAMA))
    return folder


def test_local_model_dir_counts_exactly(model_dir: Path) -> None:
    assert param_counts(spec(name_or_path=str(model_dir))) == (
        TINY_LLAMA_PARAMS,
        TINY_LLAMA_PARAMS,
    )


def test_from_scratch_overrides_count_exactly() -> None:
    s = spec(from_scratch=True, tokenizer="gpt2", config_overrides=_TINY_LLAMA)
    assert param_counts(s) == (TINY_LLAMA_PARAMS, TINY_LLAMA_PARAMS)
    wider = spec(
        from_scratch=True, tokenizer="gpt2", config_overrides={**_TINY_LLAMA, "vocab_size": 256}
    )
    assert param_counts(wider)[0] == TINY_LLAMA_PARAMS + 2 * 128 * H


def test_lora_counts_only_adapters_as_trainable(model_dir: Path) -> None:
    s = spec(name_or_path=str(model_dir), lora={"r": 4})
    assert param_counts(s) == (TINY_LLAMA_PARAMS, TINY_LLAMA_LORA)


def test_hub_model_is_unknown() -> None:
    assert param_counts(spec(name_or_path="org/some-model")) == (None, None)


def _source(tmp_path: Path, name: str, text: str | None = None, **extra: Any) -> Any:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    return validate(
        {
            "name": "rows",
            "model": {"name_or_path": "m", "task": "causal-lm"},
            "data": {"train": {"path": str(path), **extra}},
        }
    )


def test_train_rows_of_text_formats(tmp_path: Path) -> None:
    assert train_rows(_source(tmp_path, "a.jsonl", '{"text": "a"}\n\n{"text": "b"}\n')) == 2
    assert train_rows(_source(tmp_path, "b.txt", "one\ntwo\nthree")) == 3
    assert train_rows(_source(tmp_path, "c.tsv", "text\tlabel\nx\t1\ny\t0\nz\t1\n")) == 3
    assert train_rows(_source(tmp_path, "d.json", '[{"text": "a"}]')) is None
    assert train_rows(_source(tmp_path, "missing.jsonl")) is None


def test_train_rows_of_parquet_from_its_footer(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"text": [f"row {i}" for i in range(37)]}), tmp_path / "e.parquet")
    assert train_rows(_source(tmp_path, "e.parquet")) == 37


def test_hub_data_rows_are_unknown() -> None:
    s = validate(
        {
            "name": "hub",
            "model": {"name_or_path": "m", "task": "causal-lm"},
            "data": {"train": {"hub": "org/data"}},
        }
    )
    assert train_rows(s) is None


def _meta_numel(config: Any, auto: str) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = getattr(transformers, auto).from_config(config)
    return sum(p.numel() for p in model.parameters())


def test_from_scratch_vocabulary_is_the_local_tokenizers() -> None:
    """No vocab_size: trainer_core sizes it to len(tokenizer); read from tokenizer.json."""
    transformers = pytest.importorskip("transformers")
    from tests.e2e.harness import MINILM_DIR

    overrides = {k: v for k, v in _TINY_LLAMA.items() if k != "vocab_size"}
    s = spec(from_scratch=True, tokenizer=str(MINILM_DIR), config_overrides=overrides)
    vocab = len(transformers.AutoTokenizer.from_pretrained(str(MINILM_DIR)))
    fields = {k: v for k, v in overrides.items() if k != "model_type"}
    config = transformers.AutoConfig.for_model("llama", **fields, vocab_size=vocab)
    assert param_counts(s)[0] == _meta_numel(config, "AutoModelForCausalLM")
    hub_tokenizer = spec(from_scratch=True, tokenizer="gpt2", config_overrides=overrides)
    assert param_counts(hub_tokenizer) == (None, None)  # no network: unknown


def test_local_pretrained_model_counts_its_config() -> None:
    """MiniLM's own config.json (a BERT), with a 5-label classifier and an IA3 adapter."""
    transformers = pytest.importorskip("transformers")
    from tests.e2e.harness import MINILM_DIR

    s = validate(
        {
            "name": "minilm",
            "model": {
                "name_or_path": str(MINILM_DIR),
                "task": "sequence-classification",
                "num_labels": 5,
                "peft": {"adapter": "ia3"},
            },
            "data": {"train": "train.jsonl", "label_field": "label"},
        }
    )
    config = transformers.AutoConfig.from_pretrained(str(MINILM_DIR), num_labels=5)
    total, trainable = param_counts(s)
    assert total == _meta_numel(config, "AutoModelForSequenceClassification")
    # IA3 on key, value (384 each) and both output.dense (384 out, 1536 in: feed-forward
    # by PEFT's suffix rule, the attention one 384 in) per layer, plus the classifier copy.
    assert trainable == 6 * (384 + 384 + 384 + 1536) + (384 * 5 + 5)


def test_plan_facts_imports_no_training_package() -> None:
    import subprocess
    import sys

    code = (
        "import sys, service.jobs.plan_facts\n"
        "bad = {'torch', 'transformers', 'peft'} & set(sys.modules)\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_from_scratch_on_a_local_config_takes_the_tokenizers_vocabulary(model_dir: Path) -> None:
    """As trainer_core: a fresh model's vocabulary is len(tokenizer) unless overridden."""
    from tests.e2e.harness import MINILM_DIR

    s = spec(from_scratch=True, name_or_path=str(model_dir), tokenizer=str(MINILM_DIR))
    assert param_counts(s)[0] == TINY_LLAMA_PARAMS + 2 * (30522 - V) * H
    pinned = spec(
        from_scratch=True,
        name_or_path=str(model_dir),
        tokenizer=str(MINILM_DIR),
        config_overrides={"vocab_size": V},
    )
    assert param_counts(pinned)[0] == TINY_LLAMA_PARAMS
