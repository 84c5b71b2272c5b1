"""Facts for a dry run's plan that the spec alone does not hold: parameter counts, train rows.

``plan_facts(spec)`` takes a resolved spec (pass 2 made its local paths absolute) and returns
the keyword arguments of ``shunter.jobspec.plan.plan_for``; each is None when unknown.

- Parameter counts: the model is built from its config on the ``meta`` device (shapes, no
  storage, no weights read), for ``from_scratch`` with ``config_overrides.model_type`` or a
  local model folder's ``config.json``; LoRA/PEFT adapters are added the same way for the
  trainable count. Hub models: None (a dry run does not go to the network). torch and
  transformers are not dependencies of the server extra (the import-linter contract keeps
  ``service`` off them), so they are looked up at call time: absent -> None.
- Train rows: non-blank lines of a local jsonl/text file, minus the header for a csv, the row
  count in a parquet file's footer; None for json arrays, ``save_to_disk`` folders and hubs.
  Files over ``_MAX_COUNT_BYTES`` are not read (None). A csv with quoted newlines counts its
  non-blank physical lines: an upper bound.

Read-only: nothing is written and nothing is cached across calls.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from shunter.jobspec import JobSpec

__all__ = ["param_counts", "plan_facts", "train_rows"]

_MAX_COUNT_BYTES = 256 * 1024**2
_AUTO_CLASS = {
    "causal-lm": "AutoModelForCausalLM",
    "chat-sft": "AutoModelForCausalLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "regression": "AutoModelForSequenceClassification",
    "multi-label-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "masked-lm": "AutoModelForMaskedLM",
    "seq2seq": "AutoModelForSeq2SeqLM",
    "question-answering": "AutoModelForQuestionAnswering",
}
_PEFT_TASK = {
    "causal-lm": "CAUSAL_LM",
    "chat-sft": "CAUSAL_LM",
    "sequence-classification": "SEQ_CLS",
    "regression": "SEQ_CLS",
    "multi-label-classification": "SEQ_CLS",
    "token-classification": "TOKEN_CLS",
    "masked-lm": "FEATURE_EXTRACTION",
    "seq2seq": "SEQ_2_SEQ_LM",
    "question-answering": "QUESTION_ANS",
}


def plan_facts(spec: JobSpec) -> dict[str, int | None]:
    """``param_count``, ``trainable_count`` and ``train_rows`` for ``plan_for``."""
    params, trainable = param_counts(spec)
    return {"param_count": params, "trainable_count": trainable, "train_rows": train_rows(spec)}


def param_counts(spec: JobSpec) -> tuple[int | None, int | None]:
    """(all parameters, trainable ones) of the model the spec builds; None where unknown."""
    try:
        torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
    except ImportError:
        return None, None
    try:
        config = _config(spec, transformers)
        if config is None:
            return None, None
        auto = getattr(transformers, _AUTO_CLASS[spec.model.task])
        with torch.device("meta"):
            model = auto.from_config(config)
        total: int = sum(p.numel() for p in model.parameters())
        if spec.model.lora is None and spec.model.peft is None:
            return total, total
        return total, _adapter_trainable(spec, model)
    except Exception:  # a config transformers refuses: pass 2 or the worker says why
        return None, None


def _config(spec: JobSpec, transformers: Any) -> Any:
    m = spec.model
    overrides: dict[str, Any] = dict(m.config_overrides)
    if m.task == "regression":
        overrides.update(num_labels=1, problem_type="regression")
    elif m.task == "multi-label-classification":
        overrides.update(num_labels=m.num_labels, problem_type="multi_label_classification")
    elif m.num_labels is not None and "classification" in m.task:
        overrides["num_labels"] = m.num_labels
    local = m.name_or_path is not None and os.path.isfile(Path(m.name_or_path) / "config.json")
    if m.from_scratch and "vocab_size" not in overrides and not local:
        # trainer_core sizes a scratch vocabulary to the tokenizer: read a local one.
        vocab = _tokenizer_size(m.tokenizer or m.name_or_path, transformers)
        if vocab is None:
            return None
        overrides["vocab_size"] = vocab
    if local:
        assert m.name_or_path is not None
        overrides.pop("model_type", None)
        return transformers.AutoConfig.from_pretrained(
            m.name_or_path, trust_remote_code=False, **overrides
        )
    model_type = overrides.pop("model_type", None)
    if not m.from_scratch or not isinstance(model_type, str):
        return None
    return transformers.AutoConfig.for_model(model_type, **overrides)


def _tokenizer_size(source: str | None, transformers: Any) -> int | None:
    if source is None or not os.path.isdir(source):
        return None
    tok = transformers.AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    return len(tok)


def _adapter_trainable(spec: JobSpec, model: Any) -> int | None:
    try:
        peft = importlib.import_module("peft")
    except ImportError:
        return None
    m, task = spec.model, _PEFT_TASK[spec.model.task]
    if m.lora is not None:
        config = peft.LoraConfig(
            r=m.lora.r,
            lora_alpha=m.lora.alpha,
            target_modules=m.lora.target_modules,
            task_type=task,
        )
    elif m.peft is not None and m.peft.adapter == "ia3":
        config = peft.IA3Config(
            task_type=task,
            target_modules=m.peft.target_modules,
            feedforward_modules=m.peft.feedforward_modules,
        )
    elif m.peft is not None:
        config = peft.PrefixTuningConfig(
            task_type=task, num_virtual_tokens=m.peft.num_virtual_tokens or 20
        )
    else:
        return None
    torch = importlib.import_module("torch")
    with torch.device("meta"):
        wrapped = peft.get_peft_model(model, config)
    trainable: int = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    return trainable


def train_rows(spec: JobSpec) -> int | None:
    """Rows of the local train file when counting them is cheap, else None."""
    source = spec.data.train
    path = source.path
    if path is None or not os.path.isfile(path):
        return None
    try:
        if os.path.getsize(path) > _MAX_COUNT_BYTES:
            return None
        if source.format in ("jsonl", "text"):
            return _lines(path)
        if source.format == "csv":
            return max(0, _lines(path) - 1)
        if source.format == "parquet":
            return _parquet_rows(path)
    except (OSError, ValueError):
        return None
    return None


def _lines(path: str) -> int:
    """Non-blank lines (blank lines are no rows of jsonl, and dropped from text by the LM
    tasks that read text files)."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def _parquet_rows(path: str) -> int | None:
    try:
        pq = importlib.import_module("pyarrow.parquet")
    except ImportError:
        return None
    rows: int = pq.ParquetFile(path).metadata.num_rows
    return rows
