"""chat-sft: loss only on assistant tokens, packing that keeps attention within each example,
and a short run end to end (eval, final model reloads)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from tc_helpers import MINILM, TINY_LLAMA
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from trainer_core import JsonlReporter, TrainConfig, train
from trainer_core.config import DataConfig, DataSource
from trainer_core.tasks.chat_sft import OPS as CHAT
from trainer_core.tasks.chat_sft import ChatCollator, encode_messages, pack_examples

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CONVO = [
    {"role": "system", "content": "you are terse"},
    {"role": "user", "content": "what colour is the sky"},
    {"role": "assistant", "content": "blue today"},
    {"role": "user", "content": "and grass"},
    {"role": "assistant", "content": "green always"},
]


@pytest.fixture(scope="module")
def tok() -> Any:
    return AutoTokenizer.from_pretrained(MINILM)


def _words(tok: Any, ids: list[int]) -> str:
    return str(tok.decode(ids)).replace(" ", "")


def test_only_assistant_text_is_a_target(tok: Any) -> None:
    ids, labels = encode_messages(tok, CONVO, max_length=512)
    assert len(ids) == len(labels)
    trained = [t for t, lab in zip(ids, labels, strict=True) if lab != -100]
    assert all(lab in (-100, t) for t, lab in zip(ids, labels, strict=True))
    # The two assistant answers, each with its end-of-turn marker, and nothing else.
    assert _words(tok, trained) == "bluetoday<|im_end|>greenalways<|im_end|>"
    # The prompt side (system, user turns, the assistant headers) is all masked.
    masked = [t for t, lab in zip(ids, labels, strict=True) if lab == -100]
    text = _words(tok, masked)
    assert "whatcolouristhesky" in text and "andgrass" in text and "<|im_start|>assistant" in text
    assert "blue" not in text and "green" not in text


def test_weight_zero_assistant_message_is_not_trained(tok: Any) -> None:
    convo = [dict(m) for m in CONVO]
    convo[2]["weight"] = 0
    ids, labels = encode_messages(tok, convo, max_length=512)
    trained = [t for t, lab in zip(ids, labels, strict=True) if lab != -100]
    assert _words(tok, trained) == "greenalways<|im_end|>"


def test_truncation_and_a_conversation_without_an_answer(tok: Any) -> None:
    ids, labels = encode_messages(tok, CONVO, max_length=7)
    assert len(ids) == len(labels) == 7
    cfg = DataConfig(train=DataSource(path="x.jsonl"), label_field=None, max_length=64)
    with pytest.raises(ValueError, match="row 0: no assistant message"):
        CHAT.encode({"messages": [[{"role": "user", "content": "hi"}]]}, cfg, tok)
    with pytest.raises(ValueError, match="row 0: message 0 needs a role"):
        CHAT.encode({"messages": [[{"role": "bot", "content": "hi"}]]}, cfg, tok)


def test_packing_keeps_attention_within_each_example(tok: Any) -> None:
    short = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]
    other = [{"role": "user", "content": "sky"}, {"role": "assistant", "content": "blue"}]
    examples = [encode_messages(tok, c, 64) for c in (short, other, CONVO)]
    packed = pack_examples(examples, max_length=len(examples[0][0]) + len(examples[1][0]))
    # The first two fit one row, the long one goes to the next.
    assert [len(r) for r in packed["input_ids"]] == [
        len(examples[0][0]) + len(examples[1][0]),
        len(examples[2][0]),
    ]
    assert packed["position_ids"][0] == list(range(len(examples[0][0]))) + list(
        range(len(examples[1][0]))
    )
    config = AutoConfig.for_model(
        **TINY_LLAMA, vocab_size=len(tok), pad_token_id=0, **CHAT.model_kwargs(None)
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    rows = [{k: packed[k][i] for k in packed} for i in range(2)]
    batch = ChatCollator(tok)(rows)
    assert "attention_mask" not in batch
    labels = batch.pop("labels")
    with torch.no_grad():
        together = model(**batch).logits
        alone = [model(input_ids=torch.tensor([ids])).logits[0] for ids, _ in examples[:2]]
    n0 = len(examples[0][0])
    # Packed logits equal each example run alone: no attention crosses the boundary.
    torch.testing.assert_close(together[0, :n0], alone[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(together[0, n0:], alone[1], atol=1e-5, rtol=1e-4)
    assert labels[0, n0] == -100  # the second example's first token is never a target
    # Padding of the second row is its own segment: real tokens are unaffected by it.
    with torch.no_grad():
        long_alone = model(input_ids=torch.tensor([examples[2][0]])).logits[0]
    torch.testing.assert_close(together[1, : len(examples[2][0])], long_alone, atol=1e-5, rtol=1e-4)


def _write_chat(path: Path, n: int) -> Path:
    rows = []
    for i in range(n):
        a, b = i % 7, (i * 3) % 5
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"add {a} and {b}"},
                    {"role": "assistant", "content": f"the sum is {a + b}"},
                ]
            }
        )
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.mark.parametrize("packing", [False, True])
def test_chat_sft_trains_evaluates_and_reloads(tmp_path: Path, packing: bool) -> None:
    data = _write_chat(tmp_path / "chat.jsonl", 24)
    out = tmp_path / "run"
    spec = {
        "model": {
            "tokenizer": MINILM,
            "task": "chat-sft",
            "from_scratch": True,
            "config_overrides": dict(TINY_LLAMA),
        },
        "data": {
            "train": {"path": str(data)},
            "eval": {"path": str(data)},
            "max_length": 64,
            "packing": packing,
            "label_field": None,
        },
        "training": {
            "output_dir": str(out),
            "max_steps": 8,
            "per_device_train_batch_size": 4,
            "learning_rate": 3e-3,
            "logging_steps": 1,
            "eval_strategy": "steps",
            "eval_steps": 8,
            "save_strategy": "no",
            "seed": 3,
        },
    }
    result = train(TrainConfig.from_spec(spec), JsonlReporter(out))
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[-1] < losses[0] - 0.5, losses  # it learns (from ~10.3 = ln(vocab))
    assert result.metrics["eval_perplexity"] > 1.0
    model = AutoModelForCausalLM.from_pretrained(result.final_model_dir)
    assert model.config.model_type == "llama"
