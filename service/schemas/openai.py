"""Wire models of the OpenAI-compatible API (requests strict, responses as OpenAI's reference).

Requests forbid unknown keys, so a typo is a 422 naming the field. ``"auto"`` is accepted
wherever OpenAI accepts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Generic, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = [
    "CheckpointObject",
    "CheckpointsList",
    "DeletedFile",
    "EventObject",
    "EventsList",
    "FileObject",
    "FilesList",
    "FineTuningJobCreate",
    "FineTuningJobObject",
    "FineTuningJobsList",
    "Hyperparameters",
    "Method",
    "ModelObject",
    "ModelsList",
    "OpenAIError",
    "OpenAIErrorBody",
]


_T = TypeVar("_T")


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class _List(BaseModel, Generic[_T]):
    """OpenAI's list envelope; ``_Page`` says whether more follow, ``_CursorPage`` also names
    the page's first and last ids."""

    object: Literal["list"] = "list"
    data: list[_T]


class _Page(_List[_T], Generic[_T]):
    has_more: bool

    @classmethod
    def of(cls, data: Sequence[Any], more: bool) -> Self:
        """One page: its items (objects or their dicts) and whether more follow."""
        return cls.model_validate({"data": data, "has_more": more})


class _CursorPage(_Page[_T], Generic[_T]):
    first_id: str | None = None
    last_id: str | None = None

    @classmethod
    def of(cls, data: Sequence[Any], more: bool) -> Self:
        page = super().of(data, more)
        ids = [item.id for item in page.data]  # type: ignore[attr-defined]
        page.first_id, page.last_id = (ids[0], ids[-1]) if ids else (None, None)
        return page


class Hyperparameters(_In):
    n_epochs: Literal["auto"] | Annotated[int, Field(ge=1, le=50)] = Field(
        "auto", description='"auto" or 1..50'
    )
    batch_size: Literal["auto"] | Annotated[int, Field(ge=1, le=256)] = Field(
        "auto", description='"auto" or 1..256'
    )
    learning_rate_multiplier: Literal["auto"] | Annotated[float, Field(gt=0, le=10)] = Field(
        "auto", description='"auto" or (0, 10]'
    )


class _Supervised(_In):
    hyperparameters: Hyperparameters | None = None


class Method(_In):
    type: Literal["supervised"] = Field(description="only supervised fine-tuning (chat-sft)")
    supervised: _Supervised | None = None


class FineTuningJobCreate(_In):
    model: str = Field(min_length=1, max_length=255, description="an id from GET /v1/models")
    training_file: str = Field(min_length=1, max_length=64, description="a file-... id")
    validation_file: str | None = Field(None, max_length=64)
    hyperparameters: Hyperparameters | None = None
    suffix: str | None = Field(None, min_length=1, max_length=64)
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    method: Method | None = None
    metadata: dict[str, str] | None = Field(None, max_length=16)
    integrations: list[JsonValue] | None = Field(
        None, max_length=0, description="not supported: leave empty"
    )

    def given_hyperparameters(self) -> dict[str, Any]:
        """``method.supervised.hyperparameters`` when given, else the top-level ones."""
        hp = None
        if self.method is not None and self.method.supervised is not None:
            hp = self.method.supervised.hyperparameters
        hp = hp or self.hyperparameters or Hyperparameters()
        return hp.model_dump()


class FileObject(BaseModel):
    object: Literal["file"] = "file"
    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["processed"] = "processed"
    status_details: str | None = None
    expires_at: int | None = None


class FilesList(_CursorPage[FileObject]): ...


class DeletedFile(BaseModel):
    object: Literal["file"] = "file"
    id: str
    deleted: bool = True


class _Object(BaseModel):
    """A fine-tuning object: its id and creation time, and whatever else the translation
    gives (the full OpenAI object passes through)."""

    model_config = ConfigDict(extra="allow")

    id: str
    created_at: int


class FineTuningJobObject(_Object):
    object: Literal["fine_tuning.job"] = "fine_tuning.job"
    model: str
    status: str


class FineTuningJobsList(_Page[FineTuningJobObject]): ...


class EventObject(_Object):
    object: Literal["fine_tuning.job.event"] = "fine_tuning.job.event"
    level: str
    message: str


class EventsList(_Page[EventObject]): ...


class CheckpointObject(_Object):
    object: Literal["fine_tuning.job.checkpoint"] = "fine_tuning.job.checkpoint"
    step_number: int


class CheckpointsList(_CursorPage[CheckpointObject]): ...


class ModelObject(BaseModel):
    object: Literal["model"] = "model"
    id: str
    created: int
    owned_by: str


class ModelsList(_List[ModelObject]): ...


class OpenAIError(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorBody(BaseModel):
    error: OpenAIError
