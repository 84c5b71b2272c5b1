"""Parameter counts from a Hugging Face config dict, with no torch: all, and trainable under
LoRA / IA3 / prefix tuning.

``count_params(config, task)`` is ``sum(p.numel() for p in model.parameters())`` of the
model ``trainer_core.model.build_model`` makes for ``task`` (tied weights counted once),
computed from the layout in ``shunter.jobspec.model_layouts``. ``config`` is a
``config.json`` or ``config_overrides`` with ``model_type``, and the task's own keys already
merged (``num_labels``...; see ``task_config``). ``trainable_params(config, task, lora=...,
peft=...)`` is what PEFT's ``get_peft_model(...).get_nb_trainable_parameters()[0]`` gives,
following PEFT's rules:

- LoRA: ``r * (in + out)`` per targeted linear; targets are PEFT's per-family default (q/v
  projections), a list of names (a module whose name is one or ends with ``.name``) or
  ``all-linear`` (every linear but the output embedding, and for sequence classification
  the ``score``/``classifier`` head);
- IA3: one vector per targeted linear, ``in`` wide for the feed-forward ones, else ``out``;
- prefix tuning: ``num_virtual_tokens x layers x 2 x token_dim`` (key/value heads x head
  dim for Llama-style models, as PEFT sizes grouped-query attention);
- the task head PEFT keeps trainable (a copy of ``classifier``/``score`` for classification,
  ``qa_outputs`` for QA) adds its parameters.

Every function returns None where the answer is unknown: a family or head not described in
``model_layouts``, a config value it cannot read, a target PEFT would refuse or resolve in a
way not modelled here. Pure stdlib.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from shunter.jobspec.model_layouts import ALIASES as _ALIASES
from shunter.jobspec.model_layouts import LLAMA_STYLE, Layout, effective_config, layout
from shunter.jobspec.spec import LoraSpec, PeftSpec

__all__ = ["HEAD_OF_TASK", "count_params", "task_config", "trainable_params"]

# Spec task -> the AutoModelFor* head trainer_core builds for it.
HEAD_OF_TASK = {
    "causal-lm": "causal",
    "chat-sft": "causal",
    "sequence-classification": "seq-cls",
    "regression": "seq-cls",
    "multi-label-classification": "seq-cls",
    "token-classification": "token-cls",
    "masked-lm": "masked",
    "seq2seq": "seq2seq",
    "question-answering": "qa",
}
# PEFT's defaults (peft.utils.constants), for the families model_layouts describes.
_LORA_TARGETS = {
    **{mt: ("q_proj", "v_proj") for mt in (*LLAMA_STYLE, "bart") if mt != "olmo2"},
    "t5": ("q", "v"), "gpt2": ("c_attn",),
    "bert": ("query", "value"), "roberta": ("query", "value"),
}  # fmt: skip
_IA3_TARGETS = {
    **{mt: ("k_proj", "v_proj", "down_proj") for mt in ("llama", "mistral")},
    **{mt: ("q_proj", "v_proj", "down_proj") for mt in ("qwen2", "qwen3", "gemma", "gemma2")},
    "t5": ("k", "v", "wo"), "gpt2": ("c_attn", "mlp.c_proj"), "bart": ("q_proj", "v_proj", "fc2"),
    "bert": ("key", "value", "output.dense"), "roberta": ("key", "value", "output.dense"),
}  # fmt: skip
_IA3_FEEDFORWARD = {
    **{mt: ("down_proj",) for mt in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2")},
    "t5": ("wo",), "gpt2": ("mlp.c_proj",), "bart": ("fc2",),
    "bert": ("output.dense",), "roberta": ("output.dense",),
}  # fmt: skip
# Heads PEFT wraps as trainable copies (modules_to_save) per head; seq-cls heads all-linear skips.
_SAVED_HEADS = {
    "seq-cls": ("classifier", "score"),
    "token-cls": ("classifier", "score"),
    "qa": ("qa_outputs",),
}
_SEQ_CLS_HEADS = ("score", "classifier")
# Tasks whose num_labels trainer_core passes to the model (regression pins 1).
_LABELLED_TASKS = frozenset(
    {"sequence-classification", "token-classification", "multi-label-classification"}
)


def task_config(config: Mapping[str, Any], task: str, num_labels: int | None) -> dict[str, Any]:
    """``config`` with the keys trainer_core adds for ``task`` (the labels of a classifier)."""
    out = dict(config)
    if task == "regression":
        out["num_labels"] = 1
    elif num_labels is not None and task in _LABELLED_TASKS:
        out["num_labels"] = num_labels
    return out


def count_params(config: Mapping[str, Any], task: str = "causal-lm") -> int | None:
    """All parameters of ``task``'s model built from ``config``; None when unknown."""
    shape = _layout(config, task)
    return None if shape is None else shape.total


def trainable_params(
    config: Mapping[str, Any],
    task: str = "causal-lm",
    *,
    lora: LoraSpec | None = None,
    peft: PeftSpec | None = None,
) -> int | None:
    """Trainable parameters: all without an adapter, else the adapter's (module docstring)."""
    shape = _layout(config, task)
    if shape is None:
        return None
    if lora is None and peft is None:
        return shape.total
    model_type = str(config["model_type"])
    head = HEAD_OF_TASK[task]
    saved = _saved_modules(shape, head)
    if lora is not None:
        adapters = _lora(shape, model_type, head, lora, saved)
    else:
        assert peft is not None
        if peft.adapter == "ia3":
            adapters = _ia3(shape, model_type, head, peft, saved)
        else:
            adapters = _prefix(config, peft.num_virtual_tokens or 20)
    if adapters is None:
        return None
    return adapters + sum(_numel_under(shape, name) for name in saved)


def _layout(config: Mapping[str, Any], task: str) -> Layout | None:
    head = HEAD_OF_TASK.get(task)
    return None if head is None else layout(config, head)


def _module_names(shape: Layout) -> set[str]:
    """Every module name, containers included (``model.layers.0.self_attn``...)."""
    names: set[str] = set()
    for name in [x.name for x in shape.linears] + [t.name for t in shape.tensors]:
        parts = name.split(".")
        names.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return names


def _saved_modules(shape: Layout, head: str) -> list[str]:
    """Modules PEFT wraps in a trainable copy: names ending with a head key (PEFT matches
    with ``str.endswith``, so ``pre_classifier`` is one too); outermost only."""
    keys = _SAVED_HEADS.get(head, ())
    found = sorted(n for n in _module_names(shape) if any(n.endswith(k) for k in keys))
    return [n for n in found if not any(n.startswith(o + ".") for o in found)]


def _numel_under(shape: Layout, module: str) -> int:
    def inside(name: str) -> bool:
        return name == module or name.startswith(module + ".")

    return sum(x.numel for x in shape.linears if inside(x.name)) + sum(
        t.numel for t in shape.tensors if inside(t.name)
    )


def _matches(name: str, targets: tuple[str, ...] | list[str]) -> bool:
    return any(name == t or name.endswith("." + t) for t in targets)


def _in_saved(name: str, saved_keys: tuple[str, ...]) -> bool:
    # PEFT never puts an adapter inside a modules_to_save module (segment match).
    return any(re.match(rf"(^|.*\.){re.escape(k)}($|\..*)", name) for k in saved_keys)


def _targets(
    shape: Layout, targets: tuple[str, ...] | list[str], saved_keys: tuple[str, ...]
) -> list[str] | None:
    """Linear names a target list selects; None when it selects any non-linear module
    (PEFT refuses those or adapts embeddings, not modelled) or nothing (PEFT raises)."""
    linears = {x.name for x in shape.linears}
    chosen = [
        n
        for n in sorted(_module_names(shape))
        if _matches(n, targets) and not _in_saved(n, saved_keys)
    ]
    if not chosen or any(n not in linears for n in chosen):
        return None
    return chosen


def _lora(
    shape: Layout, model_type: str, head: str, lora: LoraSpec, saved: list[str]
) -> int | None:
    excluded = _excluded_keys(head)
    by_name = {x.name: x for x in shape.linears}
    spec = lora.target_modules
    if spec == "all-linear":
        skip = {shape.output} if shape.output else set()
        if shape.output is None and head == "seq-cls":
            # PEFT skips the first top-level score/classifier module it finds.
            names = _module_names(shape)
            skip.update(next(([k] for k in _SEQ_CLS_HEADS if k in names), []))
        found: list[str] | None = [
            n for n in by_name if n not in skip and not _in_saved(n, excluded)
        ]
    else:
        targets = _LORA_TARGETS.get(model_type) if spec is None else spec
        found = None if targets is None else _targets(shape, list(targets), excluded)
    if found is None or _touches(found, saved):
        return None
    return sum(lora.r * (by_name[n].fan_in + by_name[n].fan_out) for n in found)


def _excluded_keys(head: str) -> tuple[str, ...]:
    """Heads whose modules PEFT never adapts: only sequence classification names its
    modules_to_save before injecting adapters (token classification and QA do it after)."""
    return _SAVED_HEADS["seq-cls"] if head == "seq-cls" else ()


def _touches(found: list[str], saved: list[str]) -> bool:
    """An adapter on (or inside) a module PEFT then wraps as a trainable copy: PEFT refuses
    or nests them; either way not modelled."""
    return any(n == s or n.startswith(s + ".") for n in found for s in saved)


def _ia3(shape: Layout, model_type: str, head: str, peft: PeftSpec, saved: list[str]) -> int | None:
    targets = _IA3_TARGETS.get(model_type) if peft.target_modules is None else peft.target_modules
    feedforward = (
        _IA3_FEEDFORWARD.get(model_type)
        if peft.feedforward_modules is None
        else peft.feedforward_modules
    )
    if targets is None or feedforward is None:
        return None
    explicit = peft.target_modules is not None and peft.feedforward_modules is not None
    if explicit and not set(feedforward) <= set(targets):
        return None  # PEFT refuses it
    found = _targets(shape, targets, _excluded_keys(head))
    if found is None or _touches(found, saved):
        return None
    by_name = {x.name: x for x in shape.linears}
    # PEFT's feed-forward test is a bare suffix match.
    return sum(
        by_name[n].fan_in if any(n.endswith(f) for f in feedforward) else by_name[n].fan_out
        for n in found
    )


def _prefix(config: Mapping[str, Any], tokens: int) -> int | None:
    """PEFT's ``_prepare_prompt_learning_config``, then its prefix encoder's embedding."""
    c = effective_config(config)
    if c is None:
        return None
    # The layer count is read as an attribute (aliases apply), the rest from to_dict() keys.
    layers = _first(
        c, (_ALIASES.get(c["model_type"], {}).get("num_hidden_layers", "num_hidden_layers"),)
    )
    dim = _first(c, ("hidden_size", "n_embd", "d_model"))
    heads = _first(c, ("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads"))
    if layers is None or dim is None or heads is None or heads == 0:
        return None
    if c["model_type"] in LLAMA_STYLE:
        kv = c.get("num_key_value_heads") or heads
        head_dim = c.get("head_dim") or dim // heads
        if not isinstance(kv, int) or not isinstance(head_dim, int):
            return None
        dim = head_dim * kv
    return tokens * layers * 2 * dim


def _first(c: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = c.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
