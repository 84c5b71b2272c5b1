"""The JobSpec's ``training``, ``distributed``, ``resources`` and ``scheduling`` sections: how
the job trains and on what."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    JsonValue,
    Tag,
    field_validator,
    model_validator,
)

from shunter.jobspec.spec_fields import (
    LR_SCHEDULERS,
    MAX_STEPS,
    OPTIMIZERS,
    STRATEGIES,
    BatchSize,
    DeepSpeedStage,
    FsdpMixedPrecision,
    FsdpSharding,
    Ident,
    Interval,
    LrScheduler,
    Optimizer,
    PathOrHub,
    PipelineSchedule,
    Steps,
    Strategy,
    StrictModel,
    not_bool,
)

__all__ = [
    "DeepSpeedSpec",
    "DistributedSpec",
    "FsdpSpec",
    "GaloreProjection",
    "OptimArgs",
    "ResourcesSpec",
    "SchedulingSpec",
    "TrainingSpec",
    "WorkerCount",
    "WorkerRange",
]

GaloreProjection = Literal["std", "reverse_std", "right", "left"]


class OptimArgs(StrictModel):
    """Hugging Face's ``optim_args`` as typed keys: GaLore's, with HF's defaults."""

    rank: int | None = Field(
        None, ge=1, le=65536, description="galore_*: rank of the projection, 1..65536 (null = 128)"
    )
    update_proj_gap: int | None = Field(
        None,
        ge=1,
        le=MAX_STEPS,
        description="galore_*: steps between projector updates (an SVD each), 1..1e9 (null = 200)",
    )
    scale: float | None = Field(
        None, gt=0, le=1000, description="galore_*: update scale, (0, 1000] (null = 0.25)"
    )
    proj_type: GaloreProjection | None = Field(
        None, description="galore_*: std | reverse_std | right | left (null = std)"
    )


class TrainingSpec(StrictModel):
    """Hugging Face ``TrainingArguments`` names and meanings."""

    output_dir: PathOrHub | None = Field(
        None, description="set by the service per job; only torchrun users set it"
    )
    num_train_epochs: float = Field(1.0, ge=0, le=100_000, description="0..100,000")
    max_steps: int = Field(
        -1, ge=-1, le=MAX_STEPS, description="-1 (use epochs) or 1..1e9; > 0 overrides epochs"
    )
    per_device_train_batch_size: BatchSize = Field(
        16, description="examples per worker per micro-step, 1..65536"
    )
    per_device_eval_batch_size: BatchSize = Field(
        32, description="examples per worker per eval step, 1..65536"
    )
    gradient_accumulation_steps: int = Field(1, ge=1, le=65536, description="1..65536")
    learning_rate: float = Field(5e-5, gt=0, le=10, description="(0, 10]")
    weight_decay: float = Field(0.0, ge=0, le=10, description="[0, 10]")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="[0, 1)")
    adam_beta2: float = Field(0.999, ge=0, lt=1, description="[0, 1)")
    adam_epsilon: float = Field(1e-8, gt=0, le=1, description="(0, 1]")
    max_grad_norm: float = Field(1.0, ge=0, le=1e6, description="0 disables clipping; ≤ 1e6")
    # HF's default since transformers 5 (torch >= 2.8): on CPU ~5x less optimizer time than the
    # for-loop adamw_torch (issue #33). Stored specs carry the value they were submitted with.
    optim: Optimizer = Field(
        "adamw_torch_fused", description="optimizer: " + " | ".join(OPTIMIZERS)
    )
    optim_target_modules: (
        Literal["all-linear"] | Annotated[list[Ident], Field(min_length=1, max_length=256)] | None
    ) = Field(
        None,
        description="galore_* (required): linear modules GaLore projects, names (a module "
        "whose name contains one, as HF matches them) or 'all-linear'",
    )
    optim_args: OptimArgs | None = Field(
        None, description="optimizer keys: rank, update_proj_gap, scale, proj_type (galore_*)"
    )
    loraplus_lr_ratio: float | None = Field(
        None,
        gt=0,
        le=10_000,
        description="LoRA+ (with model.lora): the B matrices learn at this ratio x "
        "learning_rate, (0, 10000]; HF's loraplus_lr_ratio",
    )
    lr_scheduler_type: LrScheduler = Field(
        "linear", description="learning-rate schedule: " + " | ".join(LR_SCHEDULERS)
    )
    warmup_steps: int = Field(0, ge=0, le=MAX_STEPS, description="0..1e9")
    warmup_ratio: float = Field(0.0, ge=0, le=1, description="[0, 1] of total steps")
    bf16: bool = Field(False, description="bfloat16 mixed precision (autocast)")
    fp16: bool = Field(False, description="float16 mixed precision with a grad scaler; GPUs only")
    logging_steps: Steps = Field(10, description="1..1e9")
    eval_strategy: Interval = Field("no", description="when to evaluate: no | steps | epoch")
    eval_steps: Steps | None = Field(None, description="1..1e9; steps: defaults to logging_steps")
    save_strategy: Literal["no", "steps", "epoch", "best"] = Field(
        "steps", description="best: save after each eval that improves metric_for_best_model"
    )
    save_steps: Steps = Field(500, description="1..1e9")
    save_total_limit: int | None = Field(None, ge=1, le=10_000, description="1..10,000")
    load_best_model_at_end: bool = Field(
        False, description="the final model is the best checkpoint by metric_for_best_model"
    )
    metric_for_best_model: Ident | None = Field(
        None, description="loss, accuracy (classification) or perplexity (LM), maybe eval_-prefixed"
    )
    greater_is_better: bool | None = Field(
        None, description="default: false for metrics ending in 'loss' or 'perplexity'"
    )
    early_stopping_patience: int | None = Field(None, ge=1, le=1_000_000, description="evals")
    seed: int = Field(42, ge=0, le=2**32 - 1, description="0..2^32-1")
    report_to: list[Literal["tensorboard", "mlflow"]] = Field(
        default_factory=list,
        max_length=2,
        description=(
            "also write metrics to: tensorboard (event files in the job's storage, "
            "`shunter tensorboard JOB`), mlflow (the server's SHUNTER_MLFLOW_TRACKING_URI); "
            "needs shunter[tracking] on the workers. Metrics always go to the API too"
        ),
    )
    group_by_length: bool = Field(
        False,
        description="batch examples of similar length (inside shuffled mega-batches): less padding",
    )
    class_weights: list[Annotated[float, Field(gt=0, le=1e6)]] | None = Field(
        None,
        max_length=1_000_000,
        description="classification: one weight (0, 1e6] per label for the cross-entropy",
    )
    label_smoothing_factor: float = Field(
        0.0, ge=0, lt=1, description="[0, 1); cross-entropy tasks (HF's label_smoothing_factor)"
    )

    @field_validator("eval_strategy", "save_strategy", mode="before")
    @classmethod
    def _yaml_no(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted `no` as false; that is what the user meant.
        return "no" if value is False else value


class FsdpSpec(StrictModel):
    """FSDP2 options (strategy fsdp or fsdp+tp)."""

    sharding: FsdpSharding = Field(
        "full_shard",
        description="full_shard: params+grads+optimizer state; shard_grad_op: grads+state; "
        "hybrid_shard: full_shard inside groups, replicated across; no_shard: like DDP",
    )
    cpu_offload: bool = Field(False, description="keep sharded parameters on the CPU")
    mixed_precision: FsdpMixedPrecision = Field(
        "autocast",
        description="with bf16/fp16: autocast gathers fp32 parameters and computes under "
        "torch.autocast (the numbers DDP gives); params gathers them in bf16/fp16 (half the "
        "all-gather bytes, faster, drifts from DDP by ~1e-2 in loss)",
    )
    hybrid_shard_size: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="hybrid_shard only: ranks per shard group, dividing num_workers; "
        "null = the ranks of one node",
    )


class DeepSpeedSpec(StrictModel):
    """DeepSpeed ZeRO options (strategy deepspeed)."""

    stage: Annotated[DeepSpeedStage, BeforeValidator(not_bool)] = Field(
        2, description="ZeRO stage: 0 (DDP-like), 1 (optimizer state), 2 (+grads), 3 (+params)"
    )
    offload_optimizer: bool = Field(
        False, description="optimizer state in CPU memory; stage 1, 2 or 3"
    )
    offload_param: bool = Field(False, description="parameters in CPU memory; stage 3")
    mixed_precision: FsdpMixedPrecision = Field(
        "params",
        description="with bf16: params is DeepSpeed's own (bf16 parameters, fp32 master copy "
        "in the optimizer); autocast keeps fp32 parameters and runs forward under "
        "torch.autocast (DeepSpeed's torch_autocast: the numbers DDP gives). fp16 is always "
        "DeepSpeed's own, with its loss scaler",
    )
    config: dict[str, JsonValue] | None = Field(
        None,
        max_length=256,
        description="a DeepSpeed config merged over ours; values must agree with the spec or be "
        "'auto' (filled from the spec)",
    )


class DistributedSpec(StrictModel):
    """How the model is spread over the workers."""

    strategy: Strategy = Field("ddp", description="parallelism: " + " | ".join(STRATEGIES))
    fsdp: FsdpSpec = Field(default_factory=FsdpSpec, description="strategy fsdp / fsdp+tp")
    deepspeed: DeepSpeedSpec = Field(
        default_factory=DeepSpeedSpec, description="strategy deepspeed"
    )
    tensor_parallel_size: int = Field(
        1, ge=1, le=1024, description="ranks per tensor-parallel group (tp, fsdp+tp), 1..1024"
    )
    pipeline_parallel_size: int = Field(
        1,
        ge=1,
        le=1024,
        description="pipeline stages (strategy ddp: a dp x pp mesh, consecutive decoder layers "
        "per stage; Llama-family causal LMs), 1..1024; must divide num_workers and the layers",
    )
    pipeline_schedule: PipelineSchedule = Field(
        "1f1b", description="pipeline schedule: gpipe | 1f1b (pipeline_parallel_size > 1)"
    )
    pipeline_microbatches: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="micro-batches per step through the pipeline; null = "
        "training.gradient_accumulation_steps; 1f1b needs at least pipeline_parallel_size",
    )
    context_parallel_size: int = Field(
        1,
        ge=1,
        le=1024,
        description="ranks splitting each sequence (torch context_parallel; CUDA only), 1..1024; "
        "2 x it must divide data.max_length",
    )


class WorkerRange(StrictModel):
    """An elastic job's worker count (``shunter.jobspec.elastic``): it starts on ``min``
    and the scheduler grows and shrinks it within the range at checkpoint boundaries."""

    min: int = Field(..., ge=1, le=1024, description="workers it starts on, 1..1024")
    max: int = Field(..., ge=1, le=1024, description="workers it may grow to, min..1024")

    @model_validator(mode="after")
    def _ordered(self) -> WorkerRange:
        if self.max <= self.min:
            raise ValueError(
                f"max ({self.max}) must be above min ({self.min}); an int is a fixed count"
            )
        return self


def _worker_count_kind(value: Any) -> str:
    return "dict" if isinstance(value, dict | WorkerRange) else "int"


# An int, or {min, max}: the member is picked by the value's kind, so an error names only
# it (tags "int" and "dict": errors._walk_loc drops them from the loc).
WorkerCount = Annotated[
    Annotated[Annotated[int, Field(ge=1, le=1024)], Tag("int")]
    | Annotated[WorkerRange, Tag("dict")],
    Discriminator(_worker_count_kind),
]


class ResourcesSpec(StrictModel):
    """The gang: num_workers processes, each on one node with these resources."""

    num_workers: WorkerCount = Field(
        2,
        description="1..1024 (one process each); or {min, max}: elastic (strategies ddp and "
        "fsdp; gradient_accumulation_steps is at max and re-derived per width)",
    )
    elastic_from: WorkerRange | None = Field(
        None,
        description="set by the service on an elastic job's attempt spec (the range its "
        "num_workers was taken from): the trainer then reads the data in whole global "
        "batches, the same rows per step at every width; not for submitted specs",
    )
    gpus_per_worker: int = Field(
        1, ge=0, le=64, description="0 = CPU workers (gloo) or 1; more GPUs = more num_workers"
    )
    cpus_per_worker: float = Field(1.0, gt=0, le=1024, description="(0, 1024]")
    accelerator: str | list[str] | None = Field(
        None,
        description="GPU type (e.g. 'h100'), or a list in order of preference, or null (any); "
        "the server keeps only the types whose card holds the memory plan",
    )

    @field_validator("accelerator")
    @classmethod
    def _type_names(cls, value: str | list[str] | None) -> str | list[str] | None:
        """Lower-cased type names (Ray's ``accelerator_type:H100`` is ``h100``), no repeats."""
        names = [value] if isinstance(value, str) else value
        if names is None:
            return None
        if not names or len(names) > 16:
            raise ValueError("give 1..16 type names, or null for any type")
        out: list[str] = []
        for n in names:
            t = n.strip().removeprefix("accelerator_type:").lower()
            if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", t):
                raise ValueError(f"{n!r} is not a type name (letters, digits, . _ -)")
            if t not in out:
                out.append(t)
        return out[0] if isinstance(value, str) else out

    @property
    def accelerators(self) -> tuple[str, ...]:
        """The types asked for, in order of preference; () = any."""
        a = self.accelerator
        return () if a is None else (a,) if isinstance(a, str) else tuple(a)

    @property
    def elastic(self) -> bool:
        return isinstance(self.num_workers, WorkerRange)

    @property
    def min_workers(self) -> int:
        n = self.num_workers
        return n.min if isinstance(n, WorkerRange) else n

    @property
    def max_workers(self) -> int:
        n = self.num_workers
        return n.max if isinstance(n, WorkerRange) else n


class SchedulingSpec(StrictModel):
    """How the scheduler may treat the job once it runs."""

    preemptible: bool = Field(
        True,
        description=(
            "true: a higher-priority or under-share job may stop this one at a step boundary "
            "(it checkpoints and requeues, losing no step); false only where the team's policy "
            "allows it"
        ),
    )
