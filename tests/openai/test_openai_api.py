"""The OpenAI-compatible API driven by the official ``openai`` client, in process
(``TestClient`` as its HTTP client, the in-memory launcher): files, job creation through
the shared submit path, listing and paging, cancel, events, checkpoints, models, team
isolation and OpenAI's error shape. ``test_openai_e2e.py`` trains for real."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient
from openai import OpenAI

CHAT = [
    {
        "messages": [
            {"role": "system", "content": "terse"},
            {"role": "user", "content": f"what is {i} plus one"},
            {"role": "assistant", "content": f"{i + 1}"},
        ]
    }
    for i in range(8)
]


def _jsonl(rows: list[Any]) -> bytes:
    return ("\n".join(json.dumps(r) for r in rows) + "\n").encode()


@pytest.fixture
def oai(client: TestClient, make_token: Callable[..., str]) -> Callable[[str], OpenAI]:
    def _make(team: str = "alpha") -> OpenAI:
        token = make_token(team, "member")
        return OpenAI(base_url="http://testserver/v1", api_key=token, http_client=client)

    return _make


def test_upload_create_list_cancel_with_the_official_client(oai: Callable[..., OpenAI]) -> None:
    c = oai()
    f = c.files.create(file=("chat.jsonl", _jsonl(CHAT)), purpose="fine-tune")
    assert f.id.startswith("file-") and f.bytes == len(_jsonl(CHAT)) and f.purpose == "fine-tune"
    assert c.files.retrieve(f.id).filename == "chat.jsonl"
    assert [x.id for x in c.files.list()] == [f.id]

    job = c.fine_tuning.jobs.create(
        model="shunter-tiny-llama",
        training_file=f.id,
        validation_file=f.id,
        hyperparameters={"n_epochs": 2, "batch_size": 2, "learning_rate_multiplier": 0.5},
        suffix="Adder",
        seed=11,
        metadata={"owner": "tests"},
    )
    assert job.id.startswith("ftjob-") and job.status == "queued"
    assert job.model == "shunter-tiny-llama" and job.training_file == f.id
    assert job.hyperparameters.n_epochs == 2 and job.hyperparameters.batch_size == 2
    assert job.seed == 11 and job.metadata == {"owner": "tests"}
    assert job.fine_tuned_model is None and job.error is None

    # The JobSpec it became went through the normal submit path.
    spec = c.get(f"/jobs/{job.id.removeprefix('ft')}", cast_to=object)["spec"]  # type: ignore[index]
    assert spec["model"]["task"] == "chat-sft" and spec["name"] == "ft-adder"
    assert spec["training"]["num_train_epochs"] == 2
    assert spec["training"]["per_device_train_batch_size"] == 2
    assert spec["training"]["learning_rate"] == pytest.approx(5e-4)  # 1e-3 x 0.5
    assert spec["training"]["seed"] == 11 and spec["training"]["eval_strategy"] == "epoch"
    assert spec["data"]["train"]["dataset"].startswith("ds-")  # the file's dataset object

    second = c.fine_tuning.jobs.create(model="shunter-tiny-llama", training_file=f.id)
    page = c.fine_tuning.jobs.list(limit=1)
    assert [j.id for j in page.data] == [second.id] and page.has_more
    assert [j.id for j in c.fine_tuning.jobs.list(limit=1, after=second.id).data] == [job.id]
    assert {j.id for j in c.fine_tuning.jobs.list()} == {job.id, second.id}

    cancelled = c.fine_tuning.jobs.cancel(second.id)
    assert cancelled.status == "cancelled"
    assert c.fine_tuning.jobs.retrieve(second.id).status == "cancelled"
    events = c.fine_tuning.jobs.list_events(second.id)
    assert [e.object for e in events.data] == ["fine_tuning.job.event"] * len(events.data)
    assert "cancelled" in events.data[0].message and events.data[-1].id.startswith("ftevent-")
    assert c.fine_tuning.jobs.checkpoints.list(job.id).data == []

    assert [m.id for m in c.models.list()] == ["shunter-tiny-llama"]
    # A file used by a job keeps its bytes when deleted (the job may still read them).
    assert c.files.delete(f.id).deleted
    with pytest.raises(openai.NotFoundError):
        c.files.retrieve(f.id)


def test_other_teams_get_404_in_openai_error_shape(oai: Callable[..., OpenAI]) -> None:
    mine, theirs = oai("alpha"), oai("beta")
    f = mine.files.create(file=("chat.jsonl", _jsonl(CHAT)), purpose="fine-tune")
    job = mine.fine_tuning.jobs.create(model="shunter-tiny-llama", training_file=f.id)
    with pytest.raises(openai.NotFoundError) as info:
        theirs.fine_tuning.jobs.retrieve(job.id)
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error"
    assert job.id in body["message"]
    for call in (
        lambda: theirs.fine_tuning.jobs.cancel(job.id),
        lambda: theirs.fine_tuning.jobs.list_events(job.id),
        lambda: theirs.fine_tuning.jobs.checkpoints.list(job.id),
        lambda: theirs.files.retrieve(f.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert theirs.fine_tuning.jobs.list().data == []
    # Their file is not usable by us either: a 422 naming the field.
    with pytest.raises(openai.UnprocessableEntityError) as bad:
        theirs.fine_tuning.jobs.create(model="shunter-tiny-llama", training_file=f.id)
    assert bad.value.body["param"] == "training_file"  # type: ignore[index]


def test_bad_files_and_requests_name_the_line_or_field(oai: Callable[..., OpenAI]) -> None:
    c = oai()
    rows: list[Any] = [CHAT[0], {"prompt": "x", "completion": "y"}, CHAT[1], "[]"]
    data = _jsonl(rows[:3]) + b"{not json\n" + _jsonl([{"messages": [{"role": "user",
        "content": "no answer"}]}])  # fmt: skip
    with pytest.raises(openai.UnprocessableEntityError) as info:
        c.files.create(file=("bad.jsonl", data), purpose="fine-tune")
    msg = info.value.body["message"]  # type: ignore[index]
    assert "line 2: expected an object" in msg and "line 4: not JSON" in msg
    assert "line 5: no assistant message" in msg
    assert c.files.list().data == []  # nothing stored
    with pytest.raises(openai.UnprocessableEntityError, match="purpose"):
        c.files.create(file=("x.jsonl", _jsonl(CHAT)), purpose="assistants")

    f = c.files.create(file=("chat.jsonl", _jsonl(CHAT)), purpose="fine-tune")
    with pytest.raises(openai.UnprocessableEntityError) as info:
        c.fine_tuning.jobs.create(model="gpt-4o-mini", training_file=f.id)
    assert "shunter-tiny-llama" in info.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.UnprocessableEntityError) as info:
        c.fine_tuning.jobs.create(
            model="shunter-tiny-llama", training_file=f.id, hyperparameters={"n_epochs": 0}
        )
    assert info.value.body["param"].startswith("hyperparameters.n_epochs")  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        c.fine_tuning.jobs.retrieve("ftjob-doesnotexist")
    with pytest.raises(openai.AuthenticationError) as auth:
        OpenAI(
            base_url="http://testserver/v1", api_key="wrong", http_client=c._client
        ).models.list()
    assert auth.value.body["type"] == "authentication_error"  # type: ignore[index]


def test_a_checkpoint_names_the_model_download_of_its_step(
    oai: Callable[..., OpenAI], db: Any
) -> None:
    from service.db.tables import Checkpoint
    from shunter.model_names import model_ref

    c = oai()
    f = c.files.create(file=("chat.jsonl", _jsonl(CHAT)), purpose="fine-tune")
    job = c.fine_tuning.jobs.create(model="shunter-tiny-llama", training_file=f.id, suffix="s")
    job_id = job.id.removeprefix("ft")
    db.write(
        lambda s: s.add(
            Checkpoint(
                job_id=job_id, attempt=1, step=4, uri="/x/checkpoint-4", bytes=1, metrics={},
                verified=True,
            )
        )
    )  # fmt: skip
    (ckpt,) = c.fine_tuning.jobs.checkpoints.list(job.id).data
    assert ckpt.fine_tuned_model_checkpoint.startswith("ft:shunter-tiny-llama:alpha:s:")
    # ... which is GET /v1/jobs/<job>/checkpoints/4/download (shunter download NAME).
    assert model_ref(ckpt.fine_tuned_model_checkpoint) == (job_id, "4")
