"""``chat-sft``: a causal LM on ``{"messages": [{role, content}, ...]}`` rows.

Rendering: the tokenizer's chat template, or ``CHATML`` when it has none. Masking: only the
assistant messages' own text (and their end-of-turn marker) are targets; system/user turns
and each assistant header (``<|im_start|>assistant\\n`` in ChatML) get -100. An assistant
message with ``"weight": 0`` (OpenAI's fine-tuning format) is not trained on either.

How the spans are found without assuming a template: render ``messages[:i]`` with the
generation prompt, and ``messages[:i+1]``; the difference is exactly message i's trained
text. A template for which a conversation's rendering is not a prefix of its continuation
is rejected with a message saying so.

Packing (``data.packing``): whole examples are placed greedily, in order, into rows of at
most ``max_length`` tokens; ``position_ids`` restart at 0 for every example and no
``attention_mask`` is sent, so the model keeps attention within each example (transformers'
packed-sequence detection; it needs ``use_cache=False``, which this task's models get). The
first token of each example is never a target (nothing in the same example predicts it).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer_core.config import DataConfig
from trainer_core.tasks.base import (
    CAUSAL_LM_HEAD,
    Encoded,
    Rows,
    Tokenizer,
    language_model_task,
    pad_to,
    tokenizer_collator,
    without_kv_cache,
)

__all__ = ["CHATML", "OPS", "encode_messages", "pack_examples"]

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_ROLES = ("system", "user", "assistant", "developer", "tool")


def _render(tok: PreTrainedTokenizerBase, messages: list[dict[str, Any]], gen: bool) -> str:
    if not messages and not gen:
        return ""
    template = getattr(tok, "chat_template", None) or CHATML
    text = tok.apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=gen
    )
    assert isinstance(text, str)
    return text


def _check(messages: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: messages must be a non-empty list of {{role, content}}")
    out = []
    for j, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise ValueError(f"{where}: message {j} needs a role in {', '.join(_ROLES)}")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"{where}: message {j} needs a string content")
        out.append({"role": m["role"], "content": m["content"], "weight": m.get("weight")})
    if not any(m["role"] == "assistant" for m in out):
        raise ValueError(f"{where}: no assistant message, so nothing to train on")
    return out


def encode_messages(
    tok: PreTrainedTokenizerBase, messages: list[dict[str, Any]], max_length: int
) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of one conversation, truncated to ``max_length`` tokens."""
    ids: list[int] = []
    labels: list[int] = []

    def add(text: str, train: bool) -> None:
        piece = tok(text, add_special_tokens=False)["input_ids"] if text else []
        ids.extend(piece)
        labels.extend(piece if train else [-100] * len(piece))

    done = ""
    for i, message in enumerate(messages):
        full = _render(tok, messages[: i + 1], gen=False)
        start = _render(tok, messages[:i], gen=message["role"] == "assistant")
        if not (start.startswith(done) and full.startswith(start)):
            raise ValueError(
                "the chat template does not render a conversation as a prefix of its "
                "continuation; set model.tokenizer to one whose template does (or none: ChatML)"
            )
        trained = message["role"] == "assistant" and message.get("weight") != 0
        add(start[len(done) :], False)  # the previous turns' tail + this turn's header
        add(full[len(start) :], trained)
        done = full
    return ids[:max_length], labels[:max_length]


def pack_examples(
    examples: list[tuple[list[int], list[int]]], max_length: int
) -> dict[str, list[list[int]]]:
    """Greedy in-order packing into rows of ≤ ``max_length``; position ids per example."""
    rows: dict[str, list[list[int]]] = {"input_ids": [], "labels": [], "position_ids": []}
    cur: dict[str, list[int]] = {"input_ids": [], "labels": [], "position_ids": []}
    for ids, labels in examples:
        if cur["input_ids"] and len(cur["input_ids"]) + len(ids) > max_length:
            for k in rows:
                rows[k].append(cur[k])
            cur = {"input_ids": [], "labels": [], "position_ids": []}
        cur["input_ids"] += ids
        cur["labels"] += [-100, *labels[1:]]  # not predictable from within its example
        cur["position_ids"] += list(range(len(ids)))
    if cur["input_ids"]:
        for k in rows:
            rows[k].append(cur[k])
    return rows


def _encode(rows: Rows, cfg: DataConfig, tok: Tokenizer) -> Encoded:
    field = cfg.messages_field
    if field not in rows:
        raise ValueError(f"data.messages_field {field!r} not in the data's columns {list(rows)}")
    examples = [
        encode_messages(tok, _check(m, f"row {i}"), cfg.max_length)
        for i, m in enumerate(rows[field])
    ]
    if cfg.packing:
        return pack_examples(examples, cfg.max_length)
    return {"input_ids": [e[0] for e in examples], "labels": [e[1] for e in examples]}


class ChatCollator:
    """Pad to the longest row. Unpacked rows get an attention mask; packed rows get position
    ids, with the padding as one more "example" (positions restart at 0) so no real token
    attends to it."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.pad = int(tokenizer.pad_token_id)

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        ids = pad_to([r["input_ids"] for r in rows], self.pad)
        labels = pad_to([r["labels"] for r in rows], -100)
        if "position_ids" not in rows[0]:
            mask = pad_to([[1] * len(r["input_ids"]) for r in rows], 0)
            return {"input_ids": ids, "attention_mask": mask, "labels": labels}
        width = ids.size(1)
        positions = [
            list(r["position_ids"]) + list(range(width - len(r["position_ids"]))) for r in rows
        ]
        return {"input_ids": ids, "position_ids": pad_to(positions, 0), "labels": labels}


OPS = language_model_task(
    name="chat-sft",
    head=CAUSAL_LM_HEAD,
    encode=_encode,
    collator=tokenizer_collator(ChatCollator),
    shift=True,  # the causal-lm loss: only the masks differ
    model_kwargs=without_kv_cache,
)
