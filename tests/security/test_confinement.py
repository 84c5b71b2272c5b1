"""Confinement: a worker-reported checkpoint or final-model URI must resolve, after symlinks,
inside that job's output directory (else 422 and nothing stored); resume verifies the
manifest before loading anything, and every torch.load is weights_only. (On main 187a972
any URI was stored and resumed from, and resume unpickled with weights_only=False.)"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from sec_helpers import bearer, submit

from service.accounts.auth import hash_token, new_token
from service.jobs.states import claim_job

REPO = Path(__file__).resolve().parents[2]


def _claim(db: Any, job_id: str) -> tuple[int, dict[str, str]]:
    token = new_token()
    attempt = db.write(
        lambda s: claim_job(s, job_id=job_id, token_hash=hash_token(token), lease_seconds=30)
    )
    return attempt.number, bearer(token)


def _internal(job_id: str, n: int, what: str) -> str:
    return f"/v1/internal/jobs/{job_id}/attempts/{n}/{what}"


@pytest.mark.parametrize("where", ["other-job", "etc", "relative", "symlink-out", "s3"])
def test_checkpoint_uri_outside_the_output_dir_is_422(
    where: str, client: Any, db: Any, admin_token: str, tmp_path: Path
) -> None:
    job_id = submit(client, admin_token)["id"]
    other = submit(client, admin_token)["id"]
    n, h = _claim(db, job_id)
    out = client.get(_internal(job_id, n, "spec"), headers=h).json()["output_dir"]
    Path(out).mkdir(parents=True, exist_ok=True)
    os.symlink(tmp_path, Path(out) / "escape")
    uri = {
        "other-job": str(Path(out).parent / other / "checkpoint-1"),
        "etc": "/etc/passwd",
        "relative": f"{out}/../{other}/checkpoint-1".replace(out + "/", ""),
        "symlink-out": f"{out}/escape/checkpoint-1",
        "s3": "s3://bucket/checkpoint-1",
    }[where]
    body = {"step": 1, "uri": uri, "bytes": 1, "verified": True}
    r = client.post(_internal(job_id, n, "checkpoints"), json=body, headers=h)
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == "uri_outside_output_dir"
    job = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert job["latest_checkpoint"] is None
    final = {"status": "succeeded", "final_model_uri": uri}
    r = client.post(_internal(job_id, n, "status"), json=final, headers=h)
    assert r.status_code == 422, r.text
    ok = {"step": 1, "uri": f"{out}/checkpoint-1", "bytes": 1, "verified": True}
    assert client.post(_internal(job_id, n, "checkpoints"), json=ok, headers=h).status_code == 200


def test_every_torch_load_is_weights_only() -> None:
    offenders = []
    for folder in ("trainer_core", "worker", "launcher", "storage", "service", "shunter"):
        for path in (REPO / folder).rglob("*.py"):
            for m in re.finditer(r"torch\.load\(([^)]*)\)", path.read_text()):
                if "weights_only=True" not in m.group(1):
                    offenders.append(f"{path.relative_to(REPO)}: {m.group(0)}")
    assert offenders == []


def test_resume_refuses_a_tampered_checkpoint_before_loading(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from trainer_core.checkpoint import load_checkpoint
    from trainer_core.manifest import write_manifest

    ckpt = tmp_path / "checkpoint-1"
    ckpt.mkdir()
    torch.save({"last_epoch": 1}, ckpt / "scheduler.pt")
    (ckpt / "trainer_state.json").write_text("{}")
    write_manifest(ckpt)
    (ckpt / "scheduler.pt").write_bytes(b"tampered after the manifest")

    class Engine:
        loaded = False

        def load(self, directory: Path) -> None:
            self.loaded = True

    engine = Engine()
    with pytest.raises(ValueError, match="failed verification"):
        load_checkpoint(ckpt, engine, scheduler=None)  # type: ignore[arg-type]
    assert engine.loaded is False


def test_a_resave_keeps_a_complete_checkpoint_at_every_point(tmp_path: Path) -> None:
    """Crash between the two renames of a re-save: the old copy is still found."""
    pytest.importorskip("torch")
    from trainer_core.checkpoint import _publish, latest_verified
    from trainer_core.manifest import write_manifest

    def make(name: str, text: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / "trainer_state.json").write_text(text)
        write_manifest(d)
        return d

    final = make("checkpoint-5", "old")
    os.replace(final, tmp_path / ".old-checkpoint-5")  # the crash point: final moved aside
    assert latest_verified(tmp_path) == tmp_path / ".old-checkpoint-5"
    os.replace(tmp_path / ".old-checkpoint-5", final)
    new = make(".tmp-checkpoint-5", "new")
    _publish(new, final)
    assert (final / "trainer_state.json").read_text() == "new"
    assert not (tmp_path / ".old-checkpoint-5").exists()
    assert latest_verified(tmp_path) == final
