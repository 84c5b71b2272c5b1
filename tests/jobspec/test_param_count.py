"""``shunter.jobspec.param_count`` against the real thing: the model transformers builds on
the meta device (and PEFT's adapters on it), for every family x head it describes."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from shunter.jobspec.model_layouts import _DEFAULTS, FAMILIES, LLAMA_STYLE, effective_config, layout
from shunter.jobspec.param_count import count_params, task_config, trainable_params
from shunter.jobspec.spec import LoraSpec, PeftSpec

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

_AUTO = {
    "causal-lm": "AutoModelForCausalLM",
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
    "sequence-classification": "SEQ_CLS",
    "regression": "SEQ_CLS",
    "multi-label-classification": "SEQ_CLS",
    "token-classification": "TOKEN_CLS",
    "masked-lm": "FEATURE_EXTRACTION",
    "seq2seq": "SEQ_2_SEQ_LM",
    "question-answering": "QUESTION_ANS",
}
_DECODER = {
    "hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97,
}  # fmt: skip
_ENCODER = {
    "hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 97, "max_position_embeddings": 40,
}  # fmt: skip
# Small configs per family, each with a few variations (tying, GQA, biases, head_dim...).
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "llama": [
        _DECODER,
        {**_DECODER, "tie_word_embeddings": True, "num_key_value_heads": 4},
        {**_DECODER, "attention_bias": True, "mlp_bias": True, "head_dim": 8},
    ],
    "mistral": [_DECODER, {**_DECODER, "num_key_value_heads": 1, "tie_word_embeddings": True}],
    "qwen2": [_DECODER, {**_DECODER, "tie_word_embeddings": True, "num_key_value_heads": 4}],
    "qwen3": [_DECODER, {**_DECODER, "head_dim": 6, "attention_bias": True}],
    "gemma": [
        {**_DECODER, "head_dim": 6},
        {**_DECODER, "head_dim": 6, "tie_word_embeddings": False},
    ],
    "gemma2": [{**_DECODER, "head_dim": 6}, {**_DECODER, "head_dim": 8, "attention_bias": True}],
    "olmo2": [_DECODER, {**_DECODER, "tie_word_embeddings": True}],
    "gpt2": [
        {"n_embd": 24, "n_layer": 2, "n_head": 4, "vocab_size": 97, "n_positions": 40},
        {"hidden_size": 24, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 97,
         "n_inner": 40, "max_position_embeddings": 16, "tie_word_embeddings": False},
    ],
    "bert": [_ENCODER, {**_ENCODER, "type_vocab_size": 1, "tie_word_embeddings": False}],
    "roberta": [_ENCODER, {**_ENCODER, "tie_word_embeddings": False}],
    "distilbert": [
        {"dim": 24, "hidden_dim": 40, "n_layers": 2, "n_heads": 4, "vocab_size": 97},
        {"hidden_size": 24, "hidden_dim": 36, "num_hidden_layers": 1, "num_attention_heads": 4,
         "vocab_size": 97, "max_position_embeddings": 20},
    ],
    "t5": [
        {"d_model": 24, "d_ff": 40, "num_layers": 2, "num_heads": 4, "d_kv": 6, "vocab_size": 97},
        {"d_model": 24, "d_ff": 40, "num_layers": 2, "num_decoder_layers": 1, "num_heads": 3,
         "d_kv": 8, "vocab_size": 97, "feed_forward_proj": "gated-gelu",
         "tie_word_embeddings": False, "relative_attention_num_buckets": 8},
    ],
    "bart": [
        {"d_model": 24, "encoder_layers": 2, "decoder_layers": 1, "encoder_ffn_dim": 40,
         "decoder_ffn_dim": 32, "encoder_attention_heads": 4, "decoder_attention_heads": 2,
         "vocab_size": 97, "max_position_embeddings": 40},
        {"d_model": 24, "encoder_layers": 1, "decoder_layers": 2, "encoder_ffn_dim": 40,
         "decoder_ffn_dim": 40, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
         "vocab_size": 97, "max_position_embeddings": 40, "tie_word_embeddings": False},
    ],
}  # fmt: skip
TASKS = list(_AUTO)
CASES = [
    pytest.param(mt, i, task, id=f"{mt}-{i}-{task}")
    for mt in FAMILIES
    for i in range(len(VARIANTS[mt]))
    for task in TASKS
]


def config_for(model_type: str, variant: int, task: str, num_labels: int = 3) -> dict[str, Any]:
    return task_config(
        {"model_type": model_type, **VARIANTS[model_type][variant]}, task, num_labels
    )


def meta_model(config: dict[str, Any], task: str) -> Any | None:
    """The model transformers builds for ``task``, on the meta device; None if it has none."""
    overrides = {k: v for k, v in config.items() if k != "model_type"}
    if task == "regression":
        overrides["problem_type"] = "regression"
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **overrides)
    auto = getattr(transformers, _AUTO[task])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.device("meta"):
                return auto.from_config(hf_config)
        except ValueError as e:
            if "Unrecognized configuration class" in str(e):
                return None
            raise


def numel(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("model_type", "variant", "task"), CASES)
def test_count_matches_the_meta_model(model_type: str, variant: int, task: str) -> None:
    config = config_for(model_type, variant, task)
    model = meta_model(config, task)
    counted = count_params(config, task)
    if model is None:
        assert counted is None  # transformers has no such head: unknown, not a guess
        return
    assert counted is not None, f"{type(model).__name__} is not described"
    assert counted == numel(model)
    # The layout names the real modules: every linear the model has, with its dims.
    shape = layout(config, _HEAD[task])
    assert shape is not None
    real = {n: _dims(m) for n, m in model.named_modules() if _dims(m) is not None}
    assert {x.name: (x.fan_in, x.fan_out) for x in shape.linears} == real


def _dims(module: Any) -> tuple[int, int] | None:
    """(in, out) of a linear module (GPT-2's Conv1D stores its weight transposed)."""
    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D":
        fan_in, fan_out = module.weight.shape
        return int(fan_in), int(fan_out)
    return None


_HEAD = {
    "causal-lm": "causal",
    "sequence-classification": "seq-cls",
    "regression": "seq-cls",
    "multi-label-classification": "seq-cls",
    "token-classification": "token-cls",
    "masked-lm": "masked",
    "seq2seq": "seq2seq",
    "question-answering": "qa",
}


@pytest.mark.parametrize("model_type", FAMILIES)
def test_defaults_are_the_config_classes(model_type: str) -> None:
    """The defaults table is transformers' own, key by key (and the labels default)."""
    hf = transformers.AutoConfig.for_model(model_type)
    ours = effective_config({"model_type": model_type})
    assert ours is not None
    for key in _DEFAULTS[model_type]:
        if not hasattr(hf, key) or ours[key] is None:
            continue  # not a field of this class, or derived when unset (checked by counts)
        assert ours[key] == getattr(hf, key), key
    assert ours["num_labels"] == hf.num_labels


def test_unknown_family_or_value_is_none() -> None:
    assert count_params({"model_type": "not-a-model", "hidden_size": 8}) is None
    assert count_params({"hidden_size": 8}) is None
    assert count_params({"model_type": "llama", "hidden_size": "big"}) is None
    assert count_params({"model_type": "bert"}, "seq2seq") is None
    assert trainable_params({"model_type": "mamba"}, lora=LoraSpec(r=4)) is None


def test_task_config_sets_labels() -> None:
    base = {"model_type": "bert", **_ENCODER}
    assert task_config(base, "regression", 5)["num_labels"] == 1
    assert task_config(base, "sequence-classification", 5)["num_labels"] == 5
    assert "num_labels" not in task_config(base, "causal-lm", 5)


peft = pytest.importorskip("peft")

# A target list per family: one attention and one feed-forward module.
_LISTS = {
    **{mt: ["k_proj", "down_proj"] for mt in LLAMA_STYLE},
    "gpt2": ["c_proj"], "bert": ["key", "output.dense"], "roberta": ["query", "intermediate.dense"],
    "distilbert": ["q_lin", "lin2"], "t5": ["k", "wo"], "bart": ["k_proj", "fc1"],
}  # fmt: skip
ADAPTERS: dict[str, Any] = {
    "lora-default": LoraSpec(r=4),
    "lora-all-linear": LoraSpec(r=3, target_modules="all-linear"),
    "lora-list": None,  # _LISTS[model_type], r=2
    "ia3-default": PeftSpec(adapter="ia3"),
    "ia3-list": None,  # _LISTS[model_type], the second one feed-forward
    "prefix": PeftSpec(adapter="prefix_tuning", num_virtual_tokens=5),
}
ADAPTER_CASES = [
    pytest.param(mt, task, kind, id=f"{mt}-{task}-{kind}")
    for mt in FAMILIES
    for task in TASKS
    for kind in ADAPTERS
]


def adapter_spec(model_type: str, kind: str) -> Any:
    names = _LISTS[model_type]
    if kind == "lora-list":
        return LoraSpec(r=2, target_modules=names)
    if kind == "ia3-list":
        return PeftSpec(adapter="ia3", target_modules=names, feedforward_modules=names[1:])
    return ADAPTERS[kind]


def peft_trainable(model: Any, task: str, spec: Any) -> int | None:
    """PEFT's own count on the meta model; None when PEFT refuses the adapter."""
    task_type = _PEFT_TASK[task]
    if isinstance(spec, LoraSpec):
        config: Any = peft.LoraConfig(
            r=spec.r, target_modules=spec.target_modules, task_type=task_type
        )
    elif spec.adapter == "ia3":
        config = peft.IA3Config(
            target_modules=spec.target_modules,
            feedforward_modules=spec.feedforward_modules,
            task_type=task_type,
        )
    else:
        config = peft.PrefixTuningConfig(
            num_virtual_tokens=spec.num_virtual_tokens, task_type=task_type
        )
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            wrapped = peft.get_peft_model(model, config)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    trainable: int = wrapped.get_nb_trainable_parameters()[0]
    return trainable


@pytest.mark.parametrize(("model_type", "task", "kind"), ADAPTER_CASES)
def test_adapter_trainable_matches_peft(model_type: str, task: str, kind: str) -> None:
    config = config_for(model_type, 0, task)
    model = meta_model(config, task)
    if model is None:
        pytest.skip("transformers has no such model")
    spec = adapter_spec(model_type, kind)
    lora, adapter = (spec, None) if isinstance(spec, LoraSpec) else (None, spec)
    ours = trainable_params(config, task, lora=lora, peft=adapter)
    theirs = peft_trainable(model, task, spec)
    assert ours == theirs
