"""GET /v1/jobs/{id}/checkpoints/{final|best}/download: the model folder as a tar, byte for
byte; unknown checkpoints, missing models and other teams' jobs are refused clearly (step
checkpoints as models: test_checkpoint_download.py)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import update
from svc_helpers import bearer, submit, tiny_spec

from service.db.tables import Job


def test_final_model_downloads_as_a_tar(
    client: Any, db: Any, make_token: Callable[..., str], tmp_path: Path
) -> None:
    token = make_token("alpha")
    job_id = submit(client, token, tiny_spec("dl"))["id"]
    r = client.get(f"/v1/jobs/{job_id}/checkpoints/final/download", headers=bearer(token))
    assert r.status_code == 409 and "no final model" in r.json()["message"]

    final = tmp_path / "final"
    (final / "sub").mkdir(parents=True)
    files = {
        "config.json": b'{"model_type": "bert"}',
        "model.safetensors": bytes(range(256)) * 4099,  # not a multiple of 512
        "sub/tokenizer.json": b"{}",
    }
    for name, data in files.items():
        (final / name).write_bytes(data)
    db.write(
        lambda s: s.execute(update(Job).where(Job.id == job_id).values(final_model_uri=str(final)))
    )
    r = client.get(f"/v1/jobs/{job_id}/checkpoints/final/download", headers=bearer(token))
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-tar"
    assert f"{job_id}-final.tar" in r.headers["content-disposition"]
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert got == {f"{job_id}-final/{k}": v for k, v in files.items()}

    for ckpt, phrase in (
        ("best", "load_best_model_at_end"),
        ("12", "no verified checkpoint at step 12"),
        ("latest", "step number of a verified checkpoint"),
    ):
        r = client.get(f"/v1/jobs/{job_id}/checkpoints/{ckpt}/download", headers=bearer(token))
        assert r.status_code == 409 and phrase in r.json()["message"], r.text
    other = make_token("beta")
    r = client.get(f"/v1/jobs/{job_id}/checkpoints/final/download", headers=bearer(other))
    assert r.status_code == 404
