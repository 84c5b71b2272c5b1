"""Pipeline parallelism (``distributed.pipeline_parallel_size``) on a ``dp x pp`` device mesh.

A Llama-family causal LM is cut into ``pp`` stages of consecutive decoder layers: the first
stage also holds the token embedding, the last the final norm, the LM head and the loss.
``torch.distributed.pipelining`` runs the stated schedule (``gpipe`` or ``1f1b``) over
``microbatches`` slices of each rank's batch inside one pipeline group; the ``dp`` pipeline
replicas then average their gradients (one all-reduce per stage over the ``dp`` group), so
one step equals DDP's step on the same global batch with the same accumulation.

Every stage keeps the Hugging Face names of what it holds (``model.layers.3.*``,
``lm_head.weight``), so its ``torch.distributed.checkpoint`` shard uses the keys a DDP or
single-process checkpoint uses: the stages together write one complete checkpoint that any
other layout loads, and a pipeline loads any other layout's checkpoint (each stage reads its
own keys).

The loop does not call ``forward``/``backward`` per micro-batch here: a schedule runs the
whole accumulation window, so this engine adds two verbs. ``window_step(input_ids, labels,
summed_loss, scale)`` is the training loop's: the window as one fixed-shape tensor
(``window_tensors``: rows right-aligned, padded to ``data.max_length``, short windows filled
with unlabelled rows, so every step has the shape the stages were built for), the task's
*summed* loss, and the loop's ``dp_size / global target count``; gradients come out as the
loop's DDP steps make them. ``pipeline_step(input_ids, labels, loss_fn)`` is the mean-loss
form the strategy harness drives. Both return the loss on every rank of the pipeline group.

``unwrapped`` is the whole Hugging Face model (for ``save_pretrained``: its config and
class), with the other stages' modules moved to the meta device, so a stage holds only its
own weights; ``full_state_dict`` gathers the real ones on rank 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from trainer_core.parallel.config import ParallelConfig
from trainer_core.parallel.torch_engine import TorchEngine

__all__ = [
    "PipelineEngine",
    "build_pipeline",
    "causal_lm_loss",
    "stage_layers",
    "window_tensors",
]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def stage_layers(num_layers: int, pp: int, stage: int) -> range:
    """The decoder layers of ``stage``: an equal, consecutive share (``pp`` divides them)."""
    if num_layers % pp:
        raise ValueError(
            f"pipeline_parallel_size={pp} must divide the model's {num_layers} decoder layers"
        )
    per = num_layers // pp
    return range(stage * per, (stage + 1) * per)


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Hugging Face's causal-LM loss for one micro-batch: next-token cross entropy, the mean
    over the labelled (!= -100) positions, computed in float32."""
    shifted = logits[..., :-1, :].float().reshape(-1, logits.shape[-1])
    target = labels[..., 1:].reshape(-1).to(logits.device)
    return nn.functional.cross_entropy(shifted, target, ignore_index=-100)


def window_tensors(
    batches: list[dict[str, torch.Tensor]], *, rows: int, length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """An accumulation window of collated causal-LM batches as one ``(rows, length)`` pair
    (input ids, labels) of fixed shape: each row's real tokens (``attention_mask`` 1, on
    either padding side) moved to the left, padding (id 0, label -100) after them, and
    missing rows (a short last window) all padding. Under the stages' causal mask a real
    token attends only to the real tokens before it, so the padding changes no logit that a
    label reads, and an unlabelled row adds nothing to the loss."""
    ids = torch.zeros((rows, length), dtype=torch.long)
    labels = torch.full((rows, length), -100, dtype=torch.long)
    r = 0
    for batch in batches:
        mask = batch.get("attention_mask")
        for i in range(batch["input_ids"].shape[0]):
            keep = mask[i].bool() if mask is not None else slice(None)
            row_ids, row_labels = batch["input_ids"][i][keep], batch["labels"][i][keep]
            if r >= rows or row_ids.numel() > length:
                raise ValueError(
                    f"a window of more than {rows} rows or a row over {length} tokens: the "
                    "pipeline's shapes are fixed by the batch size and data.max_length"
                )
            ids[r, : row_ids.numel()] = row_ids
            labels[r, : row_labels.numel()] = row_labels
            r += 1
    return ids, labels


class _WindowLoss:
    """The one loss function a schedule is built with (a schedule is bound to it): calls the
    current ``fn``, keeps its values, returns them times ``factor`` for backward."""

    def __init__(self) -> None:
        self.fn: LossFn = causal_lm_loss
        self.factor: Any = 1.0
        self.values: list[torch.Tensor] = []

    def __call__(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        value = self.fn(output, target)
        self.values.append(value.detach().float())
        return value * self.factor  # type: ignore[no-any-return]

    def total(self, microbatches: int) -> torch.Tensor:
        """The sum over the step's micro-batches: the last ``microbatches`` calls. On its first
        step a schedule also calls the loss once on placeholder tensors (the stage's backward
        shape inference), before the real micro-batches."""
        return torch.stack(self.values[-microbatches:]).sum()


class _Trunk(nn.Module):
    """A stage's share of ``LlamaModel``, under the same attribute names (same FQNs)."""

    def __init__(self, base: Any, layers: range, *, first: bool, last: bool) -> None:
        super().__init__()
        self.config: Any = base.config
        self.embed_tokens: nn.Module | None = base.embed_tokens if first else None
        self.layers = nn.ModuleDict({str(i): base.layers[i] for i in layers})
        self.norm: nn.Module | None = base.norm if last else None
        self.rotary_emb: nn.Module = base.rotary_emb


class StageModule(nn.Module):
    """One pipeline stage of a ``*ForCausalLM``: token ids (first stage) or hidden states in,
    hidden states or (last stage) logits out."""

    def __init__(self, causal_lm: Any, layers: range, *, first: bool, last: bool) -> None:
        super().__init__()
        self.model: _Trunk = _Trunk(causal_lm.model, layers, first=first, last=last)
        self.lm_head: nn.Module | None = causal_lm.lm_head if last else None
        self.config: Any = causal_lm.config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from transformers.masking_utils import create_causal_mask

        m = self.model
        h = m.embed_tokens(x) if m.embed_tokens is not None else x
        position_ids = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        mask = create_causal_mask(
            config=m.config,
            inputs_embeds=h,
            attention_mask=None,
            past_key_values=None,
            position_ids=position_ids,
        )
        position_embeddings = m.rotary_emb(h, position_ids=position_ids)
        for layer in m.layers.values():
            h = layer(
                h,
                attention_mask=mask,
                position_embeddings=position_embeddings,
                position_ids=position_ids,
            )
        if self.lm_head is None:
            return h
        assert m.norm is not None
        return self.lm_head(m.norm(h))  # type: ignore[no-any-return]


def _check_model(model: nn.Module) -> int:
    config = getattr(model, "config", None)
    base = getattr(model, "model", None)
    if (
        config is None
        or base is None
        or not isinstance(getattr(base, "layers", None), nn.ModuleList)
        or not hasattr(model, "lm_head")
    ):
        raise ValueError(
            f"pipeline_parallel_size: {type(model).__name__} is not a Llama-family causal LM "
            "(model.layers + lm_head); pipeline stages are cut for those only"
        )
    if getattr(config, "tie_word_embeddings", False):
        raise ValueError(
            "pipeline_parallel_size: this model ties lm_head to the input embedding, which "
            "would sit in different stages; set model.config_overrides.tie_word_embeddings: "
            "false or train without a pipeline"
        )
    return len(base.layers)


@dataclass(kw_only=True, eq=False)
class PipelineEngine(TorchEngine):
    """``TorchEngine``'s optimizer step and DCP checkpoints over one stage's module, plus
    ``pipeline_step``. ``dp_group``/``pp_group``: this rank's groups of the ``dp x pp`` mesh."""

    pp_group: dist.ProcessGroup | None = None
    pp_rank: int = 0
    pp_size: int = 1
    schedule_name: str = "1f1b"
    microbatches: int = 1
    _stage: Any = None
    _schedule: Any = None
    _loss: _WindowLoss = field(default_factory=_WindowLoss, repr=False)

    def forward(self, **batch: Any) -> Any:
        raise RuntimeError(
            "a pipeline runs forward and backward together: call pipeline_step, not forward"
        )

    def no_sync(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def pipeline_step(
        self, input_ids: torch.Tensor, labels: torch.Tensor, loss_fn: LossFn = causal_lm_loss
    ) -> torch.Tensor:
        """Forward and backward of one accumulation window (this data-parallel rank's rows,
        cut into ``microbatches``) with ``loss_fn`` a per-micro-batch *mean*; gradients are
        the mean over micro-batches and ``dp`` replicas. Returns the mean of the micro-batch
        losses (0-dim, on every rank of the pipeline)."""
        total = self._run(input_ids, labels, loss_fn, factor=1.0)  # the schedule averages
        self._average_grads()
        return total / self.microbatches

    def window_step(
        self, input_ids: torch.Tensor, labels: torch.Tensor, summed_loss: LossFn, scale: Any
    ) -> torch.Tensor:
        """The loop's step: ``summed_loss`` gives a micro-batch's loss *summed* over its
        targets, ``scale`` is ``dp_size / global target count`` (a 0-dim tensor), so the
        gradient is the sum over the window's targets on every rank divided by their global
        count: the loop's DDP normalisation. Returns this rank's summed loss (0-dim, on every
        rank of the pipeline)."""
        # The schedule divides gradients by the micro-batch count; the dp all-reduce averages.
        total = self._run(input_ids, labels, summed_loss, factor=scale * self.microbatches)
        self._average_grads()
        return total

    def _run(
        self, input_ids: torch.Tensor, labels: torch.Tensor, fn: LossFn, factor: Any
    ) -> torch.Tensor:
        """One schedule step; the sum of the micro-batch values of ``fn`` (last stage),
        broadcast over the pipeline group."""
        schedule = self._get_schedule()
        first, last = self.pp_rank == 0, self.pp_rank == self.pp_size - 1
        self._loss.fn, self._loss.factor, self._loss.values = fn, factor, []
        args = (input_ids.to(self.device),) if first else ()
        target = labels.to(self.device) if last else None
        with (
            contextlib.nullcontext()
            if self.autocast_dtype is None
            else torch.autocast(self.device.type, dtype=self.autocast_dtype)
        ):
            schedule.step(*args, target=target)
        total = self._loss.total(self.microbatches) if last else torch.zeros((), device=self.device)
        if self.pp_size > 1:
            dist.broadcast(total, group_src=self.pp_size - 1, group=self.pp_group)
        return total

    def _get_schedule(self) -> Any:
        if self._schedule is None:
            kind = ScheduleGPipe if self.schedule_name == "gpipe" else Schedule1F1B
            self._schedule = kind(self._stage, n_microbatches=self.microbatches, loss_fn=self._loss)
        return self._schedule

    @torch.no_grad()
    def _average_grads(self) -> None:
        if self.dp_size == 1:
            return
        grads = [p.grad for p in self._params if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.dp_group)
        flat /= self.dp_size
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def clip_and_step(
        self, max_grad_norm: float | None, skip: Callable[[torch.Tensor], bool] | None = None
    ) -> torch.Tensor:
        # The global norm: each stage's squared norm, summed over the pipeline group.
        grads = [p.grad for p in self._params if p.grad is not None]
        local = torch.nn.utils.get_total_norm(grads, norm_type=2.0).float() if grads else None
        sq = (local**2) if local is not None else torch.zeros((), device=self.device)
        if self.pp_size > 1:
            dist.all_reduce(sq, op=dist.ReduceOp.SUM, group=self.pp_group)
        norm = sq.sqrt()
        if max_grad_norm is not None:
            coef = torch.clamp(max_grad_norm / (norm + 1e-6), max=1.0)
            for g in grads:
                g.mul_(coef.to(device=g.device, dtype=g.dtype))
        if skip is None or not skip(norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every stage's weights gathered on global rank 0 (HF names); others get {}."""
        mine = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        if self.dp_rank != 0:  # the other replicas hold the same weights
            mine = {}
        pieces: list[Any] = [None] * self.pp_size
        dist.all_gather_object(pieces, mine, group=self.pp_group)
        if dist.get_rank() != 0:
            return {}
        out: dict[str, torch.Tensor] = {}
        for piece in pieces:
            out.update(piece)
        return out


def build_pipeline(
    model: nn.Module,
    cfg: ParallelConfig,
    *,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    device: torch.device,
    autocast_dtype: torch.dtype | None,
) -> PipelineEngine:
    """Cut ``model`` into this rank's stage on a ``dp x pp`` mesh (pp ranks adjacent) and
    return its engine; the optimizer covers this stage's parameters only."""
    if cfg.fp16:
        raise ValueError(
            "pipeline_parallel_size > 1 has no fp16 grad scaler across stages; use bf16"
        )
    num_layers = _check_model(model)
    world = dist.get_world_size()
    pp = cfg.pipeline_parallel_size
    if world % pp:
        raise ValueError(
            f"pipeline_parallel_size={pp} must divide num_workers ({world}); pick a divisor"
        )
    dp = world // pp
    mesh = init_device_mesh(device.type, (dp, pp), mesh_dim_names=("dp", "pp"))
    pp_mesh, dp_mesh = mesh["pp"], mesh["dp"]
    stage_index = pp_mesh.get_local_rank()
    first, last = stage_index == 0, stage_index == pp - 1
    stage_module = StageModule(
        model, stage_layers(num_layers, pp, stage_index), first=first, last=last
    )
    _free_other_stages(model, stage_module)
    stage_module.to(device)
    stage = PipelineStage(stage_module, stage_index, pp, device, group=pp_mesh.get_group())
    return PipelineEngine(
        model=stage_module,
        unwrapped=model,
        optimizer=make_optimizer(stage_module),
        device=device,
        dp_rank=dp_mesh.get_local_rank(),
        dp_size=dp,
        dp_group=dp_mesh.get_group(),
        autocast_dtype=autocast_dtype,
        distributed=True,
        pp_group=pp_mesh.get_group(),
        pp_rank=stage_index,
        pp_size=pp,
        schedule_name=cfg.pipeline_schedule,
        microbatches=cfg.pipeline_microbatches,
        _stage=stage,
    )


def _free_other_stages(model: nn.Module, stage_module: nn.Module) -> None:
    """Move every parameter and buffer of ``model`` that ``stage_module`` does not hold to the
    meta device: the other stages' weights are freed, the model's structure (config, class,
    names) stays for ``save_pretrained``."""
    mine = {id(t) for t in (*stage_module.parameters(), *stage_module.buffers())}
    with torch.no_grad():
        for module in model.modules():
            for name, param in module._parameters.items():
                if param is not None and id(param) not in mine:
                    meta = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
                    module._parameters[name] = meta
            for name, buffer in module._buffers.items():
                if buffer is not None and id(buffer) not in mine:
                    module._buffers[name] = buffer.to("meta")
