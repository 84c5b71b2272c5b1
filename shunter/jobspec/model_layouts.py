"""The parameter tensors of a Hugging Face model, from its config alone: a layout per family.

``layout(config, head)`` lists, for one ``model_type`` and task head, every ``nn.Linear`` (or
GPT-2 ``Conv1D``) with its module name and (in, out) dims, and every other parameter tensor
(embeddings, norms, biases of their own) with its size: the modules transformers'
``AutoModelFor<head>.from_config`` builds, named as ``model.named_modules()`` names them, so
adapter target names match as PEFT matches them. ``None`` for a family, head or config
variant not described here (never a guess).

Defaults are those of transformers' config classes (checked against them by
``tests/jobspec/test_param_count.py``) for the fields that shape parameters; a config dict
(``config.json`` or ``config_overrides``) overrides them, with each class's
``attribute_map`` aliases (``hidden_size`` -> ``n_embd`` for GPT-2...). Pure stdlib.

Heads: ``causal``, ``seq-cls``, ``token-cls``, ``qa``, ``masked``, ``seq2seq``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ALIASES",
    "FAMILIES",
    "HEADS",
    "Layout",
    "Linear",
    "Tensor",
    "effective_config",
    "layout",
]

HEADS = ("causal", "seq-cls", "token-cls", "qa", "masked", "seq2seq")
# Decoder-only families with Llama's module names (q/k/v/o_proj, gate/up/down_proj).
LLAMA_STYLE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "olmo2")


@dataclass(frozen=True)
class Linear:
    """A linear module: weight ``out x in`` (plus ``out`` bias); ``tied``: the weight is the
    input embedding's (counted there)."""

    name: str
    fan_in: int
    fan_out: int
    bias: bool
    tied: bool = False

    @property
    def numel(self) -> int:
        return (0 if self.tied else self.fan_in * self.fan_out) + (self.fan_out if self.bias else 0)


@dataclass(frozen=True)
class Tensor:
    """Parameters of a non-linear module (embedding, norm, a bias of its own), ``numel`` in all."""

    name: str
    numel: int


@dataclass
class Layout:
    """The model's modules; ``output``: the output-embedding linear (PEFT's ``all-linear``
    skips it); ``num_layers`` / ``token_dim`` / ``kv_dim``: what prefix tuning sizes by."""

    linears: list[Linear] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    output: str | None = None

    @property
    def total(self) -> int:
        return sum(x.numel for x in self.linears) + sum(t.numel for t in self.tensors)

    def lin(self, name: str, fan_in: int, fan_out: int, bias: bool, tied: bool = False) -> None:
        self.linears.append(Linear(name, fan_in, fan_out, bias, tied))

    def ten(self, name: str, numel: int) -> None:
        self.tensors.append(Tensor(name, numel))


class Unknown(Exception):
    """A config value this module cannot interpret: the count is unknown."""


# Per family: the config-class defaults that shape parameters, and attribute_map aliases.
_LLAMA = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": None,
    "head_dim": None, "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
}  # fmt: skip
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": _LLAMA,
    "mistral": {**_LLAMA, "intermediate_size": 14336, "num_key_value_heads": 8},
    "qwen2": {**_LLAMA, "vocab_size": 151936, "intermediate_size": 22016},
    "qwen3": {**_LLAMA, "vocab_size": 151936, "intermediate_size": 22016, "head_dim": 128},
    "gemma": {
        **_LLAMA, "vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
        "head_dim": 256, "tie_word_embeddings": True,
    },
    "gemma2": {
        **_LLAMA, "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
        "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "tie_word_embeddings": True,
    },
    "olmo2": {**_LLAMA, "vocab_size": 50304},
    "gpt2": {
        "vocab_size": 50257, "n_embd": 768, "n_inner": None, "n_layer": 12, "n_head": 12,
        "n_positions": 1024, "tie_word_embeddings": True, "add_cross_attention": False,
    },
    "bert": {
        "vocab_size": 30522, "hidden_size": 768, "intermediate_size": 3072,
        "num_hidden_layers": 12, "num_attention_heads": 12, "max_position_embeddings": 512,
        "type_vocab_size": 2, "tie_word_embeddings": True, "add_cross_attention": False,
    },
    "roberta": {
        "vocab_size": 50265, "hidden_size": 768, "intermediate_size": 3072,
        "num_hidden_layers": 12, "num_attention_heads": 12, "max_position_embeddings": 512,
        "type_vocab_size": 2, "tie_word_embeddings": True, "add_cross_attention": False,
    },
    "distilbert": {
        "vocab_size": 30522, "dim": 768, "hidden_dim": 3072, "n_layers": 6, "n_heads": 12,
        "max_position_embeddings": 512, "sinusoidal_pos_embds": False,
        "tie_word_embeddings": True,
    },
    "t5": {
        "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6,
        "num_decoder_layers": None, "num_heads": 8, "relative_attention_num_buckets": 32,
        "feed_forward_proj": "relu", "tie_word_embeddings": True,
    },
    "bart": {
        "vocab_size": 50265, "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
        "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096, "encoder_attention_heads": 16,
        "max_position_embeddings": 1024, "tie_word_embeddings": True,
    },
}  # fmt: skip
_DEFAULT_LABELS = {"bart": 3}  # BartConfig ships a 3-label id2label; every other class 2
ALIASES: dict[str, dict[str, str]] = {
    "gpt2": {
        "hidden_size": "n_embd", "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head", "num_hidden_layers": "n_layer",
    },
    "distilbert": {
        "hidden_size": "dim", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers",
    },
    "t5": {
        "hidden_size": "d_model", "num_attention_heads": "num_heads",
        "num_hidden_layers": "num_layers", "head_dim": "d_kv",
    },
    "bart": {
        "num_attention_heads": "encoder_attention_heads", "hidden_size": "d_model",
        "num_hidden_layers": "encoder_layers",
    },
}  # fmt: skip


def effective_config(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """``config`` over its family's defaults, aliases resolved, ``num_labels`` filled from
    ``id2label`` as ``PretrainedConfig`` does; None for a family not described here."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in _DEFAULTS:
        return None
    aliases = ALIASES.get(model_type, {})
    merged = dict(_DEFAULTS[model_type])
    labels = _DEFAULT_LABELS.get(model_type, 2)
    id2label = config.get("id2label")
    if isinstance(id2label, Mapping) and id2label:
        labels = len(id2label)
    for key, value in config.items():
        merged[aliases.get(key, key)] = value
    if config.get("num_labels") is not None:
        labels = config["num_labels"]
    merged["num_labels"] = labels
    return merged


def layout(config: Mapping[str, Any], head: str) -> Layout | None:
    """Every parameter tensor of ``model_type`` x ``head``; None when not described here."""
    c = effective_config(config)
    if c is None or head not in HEADS:
        return None
    builder = _BUILDERS[c["model_type"]]
    try:
        return builder(c, head)
    except Unknown:
        return None


def _int(c: Mapping[str, Any], key: str) -> int:
    value = c.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Unknown(key)
    return value


def _bool(c: Mapping[str, Any], key: str) -> bool:
    value = c.get(key)
    if not isinstance(value, bool):
        raise Unknown(key)
    return value


def _labels(c: Mapping[str, Any]) -> int:
    labels = _int(c, "num_labels")
    if labels < 1:
        raise Unknown("num_labels")
    return labels


# The head of a decoder-only family (Llama-like, GPT-2) by task head: (linear, output width,
# bias). Only the token classifier's name differs between the families; QA is the default.
_DECODER_HEADS: Mapping[str, tuple[str | None, str, bool]] = {
    "causal": ("lm_head", "vocab", False),
    "seq-cls": ("score", "labels", False),
    "token-cls": (None, "labels", True),  # None: the family's own name
}


def _decoder_head(
    out: Layout, c: Mapping[str, Any], head: str, hidden: int, vocab: int, *, token_cls: str
) -> None:
    name, width, bias = _DECODER_HEADS.get(head, ("qa_outputs", "2", True))
    fan_out = {"vocab": vocab, "2": 2}.get(width) or _labels(c)
    tied = head == "causal" and _bool(c, "tie_word_embeddings")
    out.lin(name or token_cls, hidden, fan_out, bias, tied=tied)
    if head == "causal":
        out.output = "lm_head"


# The classification heads of the encoder and encoder-decoder families: per family and head,
# the linears on top of the ``hidden``-wide output, each with a bias: (name, output width:
# "hidden", "labels" (num_labels) or "2"). A head a family leaves out is the usual one:
# token-cls a ``classifier``, qa ``qa_outputs``, both num_labels wide.
_CLASSIFIER_DEFAULTS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "token-cls": (("classifier", "labels"),),
    "qa": (("qa_outputs", "labels"),),
}
_SEQ_CLS_HEAD = (
    ("classification_head.dense", "hidden"),
    ("classification_head.out_proj", "labels"),
)
_CLASSIFIERS: Mapping[str, Mapping[str, tuple[tuple[str, str], ...]]] = {
    "bert": {"seq-cls": (("bert.pooler.dense", "hidden"), ("classifier", "labels"))},
    "roberta": {"seq-cls": (("classifier.dense", "hidden"), ("classifier.out_proj", "labels"))},
    "distilbert": {"seq-cls": (("pre_classifier", "hidden"), ("classifier", "labels"))},
    "t5": {"seq-cls": _SEQ_CLS_HEAD},
    "bart": {"seq-cls": _SEQ_CLS_HEAD, "qa": (("qa_outputs", "2"),)},
}


def _classifier_head(out: Layout, c: Mapping[str, Any], head: str, hidden: int) -> None:
    """The ``seq-cls``, ``token-cls`` or ``qa`` head of an encoder family (``_CLASSIFIERS``)."""
    linears = _CLASSIFIERS[c["model_type"]].get(head) or _CLASSIFIER_DEFAULTS[head]
    for name, width in linears:
        fan_out = {"hidden": hidden, "2": 2}.get(width) or _labels(c)
        out.lin(name, hidden, fan_out, True)


# -- decoder-only, Llama-style ------------------------------------------------------------------

# q/k/v bias, o bias: ``attention_bias`` for these; Qwen2 biases q, k, v and never o.
_QKV_BIAS_FIXED = {"mistral": (False, False), "qwen2": (True, False)}
_LAYER_NORMS = {
    "gemma2": ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
               "post_feedforward_layernorm"),
    "olmo2": ("post_attention_layernorm", "post_feedforward_layernorm"),
}  # fmt: skip
_NO_TOKEN_CLS = frozenset({"olmo2"})
_NO_QA = frozenset({"gemma", "gemma2", "olmo2"})
_QA_TRANSFORMER = frozenset({"llama", "qwen2", "qwen3"})  # their QA models name the base so


def _llama_like(c: Mapping[str, Any], head: str) -> Layout | None:
    mt = c["model_type"]
    if head in ("masked", "seq2seq") or (head == "token-cls" and mt in _NO_TOKEN_CLS):
        return None
    if head == "qa" and mt in _NO_QA:
        return None
    hidden, inter = _int(c, "hidden_size"), _int(c, "intermediate_size")
    layers, vocab, heads = (
        _int(c, "num_hidden_layers"),
        _int(c, "vocab_size"),
        _int(c, "num_attention_heads"),
    )
    kv = heads if c.get("num_key_value_heads") is None else _int(c, "num_key_value_heads")
    if heads == 0:
        raise Unknown("num_attention_heads")
    head_dim = hidden // heads if c.get("head_dim") is None else _int(c, "head_dim")
    if mt in _QKV_BIAS_FIXED:
        qkv_bias, o_bias = _QKV_BIAS_FIXED[mt]
    else:
        qkv_bias = o_bias = _bool(c, "attention_bias")
    mlp_bias = _bool(c, "mlp_bias") if mt == "llama" else False
    p = "transformer." if head == "qa" and mt in _QA_TRANSFORMER else "model."
    out = Layout()
    out.ten(f"{p}embed_tokens", vocab * hidden)
    for i in range(layers):
        a, m = f"{p}layers.{i}.self_attn", f"{p}layers.{i}.mlp"
        out.lin(f"{a}.q_proj", hidden, heads * head_dim, qkv_bias)
        out.lin(f"{a}.k_proj", hidden, kv * head_dim, qkv_bias)
        out.lin(f"{a}.v_proj", hidden, kv * head_dim, qkv_bias)
        out.lin(f"{a}.o_proj", heads * head_dim, hidden, o_bias)
        if mt == "qwen3":
            out.ten(f"{a}.q_norm", head_dim)
            out.ten(f"{a}.k_norm", head_dim)
        elif mt == "olmo2":
            out.ten(f"{a}.q_norm", heads * head_dim)
            out.ten(f"{a}.k_norm", kv * head_dim)
        out.lin(f"{m}.gate_proj", hidden, inter, mlp_bias)
        out.lin(f"{m}.up_proj", hidden, inter, mlp_bias)
        out.lin(f"{m}.down_proj", inter, hidden, mlp_bias)
        for norm in _LAYER_NORMS.get(mt, ("input_layernorm", "post_attention_layernorm")):
            out.ten(f"{p}layers.{i}.{norm}", hidden)
    out.ten(f"{p}norm", hidden)
    _decoder_head(out, c, head, hidden, vocab, token_cls="score")
    return out


# -- GPT-2 --------------------------------------------------------------------------------------


def _gpt2(c: Mapping[str, Any], head: str) -> Layout | None:
    if head in ("masked", "seq2seq") or _bool(c, "add_cross_attention"):
        return None
    hidden, layers, vocab = _int(c, "n_embd"), _int(c, "n_layer"), _int(c, "vocab_size")
    inner = 4 * hidden if c.get("n_inner") is None else _int(c, "n_inner")
    out = Layout()
    out.ten("transformer.wte", vocab * hidden)
    out.ten("transformer.wpe", _int(c, "n_positions") * hidden)
    for i in range(layers):
        b = f"transformer.h.{i}"
        out.ten(f"{b}.ln_1", 2 * hidden)
        out.lin(f"{b}.attn.c_attn", hidden, 3 * hidden, True)
        out.lin(f"{b}.attn.c_proj", hidden, hidden, True)
        out.ten(f"{b}.ln_2", 2 * hidden)
        out.lin(f"{b}.mlp.c_fc", hidden, inner, True)
        out.lin(f"{b}.mlp.c_proj", inner, hidden, True)
    out.ten("transformer.ln_f", 2 * hidden)
    _decoder_head(out, c, head, hidden, vocab, token_cls="classifier")
    return out


# -- BERT-style encoders ------------------------------------------------------------------------


# The language-model head of a BERT-style family: its dense, norm, decoder and own bias.
_LM_HEADS: Mapping[str, tuple[str, str, str, str]] = {
    "bert": (
        "cls.predictions.transform.dense",
        "cls.predictions.transform.LayerNorm",
        "cls.predictions.decoder",
        "cls.predictions",
    ),
    "roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.decoder", "lm_head"),
}


def _bert_like(c: Mapping[str, Any], head: str) -> Layout | None:
    mt = c["model_type"]
    if head == "seq2seq" or _bool(c, "add_cross_attention"):
        return None
    hidden, inter = _int(c, "hidden_size"), _int(c, "intermediate_size")
    layers, vocab = _int(c, "num_hidden_layers"), _int(c, "vocab_size")
    p = f"{mt}."
    out = Layout()
    e = f"{p}embeddings"
    out.ten(f"{e}.word_embeddings", vocab * hidden)
    out.ten(f"{e}.position_embeddings", _int(c, "max_position_embeddings") * hidden)
    out.ten(f"{e}.token_type_embeddings", _int(c, "type_vocab_size") * hidden)
    out.ten(f"{e}.LayerNorm", 2 * hidden)
    for i in range(layers):
        b = f"{p}encoder.layer.{i}"
        for name in ("query", "key", "value"):
            out.lin(f"{b}.attention.self.{name}", hidden, hidden, True)
        out.lin(f"{b}.attention.output.dense", hidden, hidden, True)
        out.ten(f"{b}.attention.output.LayerNorm", 2 * hidden)
        out.lin(f"{b}.intermediate.dense", hidden, inter, True)
        out.lin(f"{b}.output.dense", inter, hidden, True)
        out.ten(f"{b}.output.LayerNorm", 2 * hidden)
    tied = _bool(c, "tie_word_embeddings")
    if head in ("causal", "masked"):
        dense, norm, decoder, bias = _LM_HEADS[mt]
        out.lin(dense, hidden, hidden, True)
        out.ten(norm, 2 * hidden)
        # Untied, the decoder's weight and bias are its own; tied, the embedding's and the
        # head's own bias.
        out.lin(decoder, hidden, vocab, not tied, tied=tied)
        out.ten(bias, vocab)
        out.output = decoder
    else:
        _classifier_head(out, c, head, hidden)
    return out


def _distilbert(c: Mapping[str, Any], head: str) -> Layout | None:
    if head in ("causal", "seq2seq") or _bool(c, "sinusoidal_pos_embds"):
        return None
    hidden, inter = _int(c, "dim"), _int(c, "hidden_dim")
    layers, vocab = _int(c, "n_layers"), _int(c, "vocab_size")
    out = Layout()
    out.ten("distilbert.embeddings.word_embeddings", vocab * hidden)
    out.ten(
        "distilbert.embeddings.position_embeddings", _int(c, "max_position_embeddings") * hidden
    )
    out.ten("distilbert.embeddings.LayerNorm", 2 * hidden)
    for i in range(layers):
        b = f"distilbert.transformer.layer.{i}"
        for name in ("q_lin", "k_lin", "v_lin", "out_lin"):
            out.lin(f"{b}.attention.{name}", hidden, hidden, True)
        out.ten(f"{b}.sa_layer_norm", 2 * hidden)
        out.lin(f"{b}.ffn.lin1", hidden, inter, True)
        out.lin(f"{b}.ffn.lin2", inter, hidden, True)
        out.ten(f"{b}.output_layer_norm", 2 * hidden)
    if head == "masked":
        out.lin("vocab_transform", hidden, hidden, True)
        out.ten("vocab_layer_norm", 2 * hidden)
        out.lin("vocab_projector", hidden, vocab, True, tied=_bool(c, "tie_word_embeddings"))
        out.output = "vocab_projector"
    else:
        _classifier_head(out, c, head, hidden)
    return out


# -- encoder-decoders ---------------------------------------------------------------------------


def _t5(c: Mapping[str, Any], head: str) -> Layout | None:
    if head in ("causal", "masked"):
        return None
    d, kv, ff = _int(c, "d_model"), _int(c, "d_kv"), _int(c, "d_ff")
    heads, vocab = _int(c, "num_heads"), _int(c, "vocab_size")
    enc = _int(c, "num_layers")
    dec = enc if c.get("num_decoder_layers") is None else _int(c, "num_decoder_layers")
    buckets = _int(c, "relative_attention_num_buckets")
    proj = c.get("feed_forward_proj")
    if not isinstance(proj, str) or len(parts := proj.split("-")) > 2:
        raise Unknown("feed_forward_proj")
    if len(parts) == 2 and parts[0] != "gated":
        raise Unknown("feed_forward_proj")
    gated, inner = len(parts) == 2, heads * kv
    p = "transformer." if head in ("seq-cls", "token-cls") else ""
    out = Layout()
    out.ten(f"{p}shared", vocab * d)

    def attention(name: str, relative: bool) -> None:
        for w in ("q", "k", "v"):
            out.lin(f"{name}.{w}", d, inner, False)
        out.lin(f"{name}.o", inner, d, False)
        if relative:
            out.ten(f"{name}.relative_attention_bias", buckets * heads)

    def mlp(name: str) -> None:
        for w in ("wi_0", "wi_1") if gated else ("wi",):
            out.lin(f"{name}.DenseReluDense.{w}", d, ff, False)
        out.lin(f"{name}.DenseReluDense.wo", ff, d, False)
        out.ten(f"{name}.layer_norm", d)

    for i in range(enc):
        b = f"{p}encoder.block.{i}.layer"
        attention(f"{b}.0.SelfAttention", i == 0)
        out.ten(f"{b}.0.layer_norm", d)
        mlp(f"{b}.1")
    out.ten(f"{p}encoder.final_layer_norm", d)
    if head != "token-cls":  # T5ForTokenClassification is the encoder alone
        for i in range(dec):
            b = f"{p}decoder.block.{i}.layer"
            attention(f"{b}.0.SelfAttention", i == 0)
            out.ten(f"{b}.0.layer_norm", d)
            attention(f"{b}.1.EncDecAttention", False)
            out.ten(f"{b}.1.layer_norm", d)
            mlp(f"{b}.2")
        out.ten(f"{p}decoder.final_layer_norm", d)
    if head == "seq2seq":  # T5Config forces tie_word_embeddings: lm_head is always shared's
        out.lin("lm_head", d, vocab, False, tied=True)
        out.output = "lm_head"
    else:
        _classifier_head(out, c, head, d)
    return out


def _bart(c: Mapping[str, Any], head: str) -> Layout | None:
    if head == "token-cls":
        return None
    if head == "masked":  # AutoModelForMaskedLM maps bart to BartForConditionalGeneration
        head = "seq2seq"
    d, vocab = _int(c, "d_model"), _int(c, "vocab_size")
    positions = (_int(c, "max_position_embeddings") + 2) * d  # BART offsets positions by 2
    out = Layout()

    def layer(name: str, ffn: int, cross: bool) -> None:
        attns = ("self_attn", "encoder_attn") if cross else ("self_attn",)
        for attn in attns:
            for w in ("k_proj", "v_proj", "q_proj", "out_proj"):
                out.lin(f"{name}.{attn}.{w}", d, d, True)
            out.ten(f"{name}.{attn}_layer_norm", 2 * d)
        out.lin(f"{name}.fc1", d, ffn, True)
        out.lin(f"{name}.fc2", ffn, d, True)
        out.ten(f"{name}.final_layer_norm", 2 * d)

    def stack(name: str, layers: int, ffn: int, cross: bool) -> None:
        out.ten(f"{name}.embed_positions", positions)
        for i in range(layers):
            layer(f"{name}.layers.{i}", ffn, cross)
        out.ten(f"{name}.layernorm_embedding", 2 * d)

    dec_layers, dec_ffn = _int(c, "decoder_layers"), _int(c, "decoder_ffn_dim")
    tied = _bool(c, "tie_word_embeddings")
    if head == "causal":  # BartForCausalLM: the decoder alone (cross-attention included)
        out.ten("model.decoder.embed_tokens", vocab * d)
        stack("model.decoder", dec_layers, dec_ffn, True)
        out.lin("lm_head", d, vocab, False, tied=tied)
        out.output = "lm_head"
        return out
    out.ten("model.shared", vocab * d)
    if not tied:  # transformers ties every embedding to shared only with tie_word_embeddings
        out.ten("model.encoder.embed_tokens", vocab * d)
        out.ten("model.decoder.embed_tokens", vocab * d)
    stack("model.encoder", _int(c, "encoder_layers"), _int(c, "encoder_ffn_dim"), False)
    stack("model.decoder", dec_layers, dec_ffn, True)
    if head == "seq2seq":
        out.lin("lm_head", d, vocab, False, tied=tied)
        out.output = "lm_head"
    else:
        _classifier_head(out, c, head, d)
    return out


_BUILDERS: dict[str, Callable[[Mapping[str, Any], str], Layout | None]] = {
    **{
        mt: _llama_like for mt in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "olmo2")
    },
    "gpt2": _gpt2,
    "bert": _bert_like,
    "roberta": _bert_like,
    "distilbert": _distilbert,
    "t5": _t5,
    "bart": _bart,
}
FAMILIES: tuple[str, ...] = tuple(_BUILDERS)
