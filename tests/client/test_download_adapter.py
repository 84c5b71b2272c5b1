"""``Client.download_model`` of an adapter that came with its base (``final/base/``): the
unpacked ``adapter_config.json`` names the downloaded base, not the cluster's path."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import httpx

from shunter.client import Client
from shunter.model_names import fine_tuned_model_name, model_ref

CLUSTER_BASE = "/data/outputs/j1/final/base"


def _tar(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _download(tmp_path: Path, files: dict[str, str]) -> Path:
    body = _tar(files)
    transport = httpx.MockTransport(lambda _request: httpx.Response(200, content=body))
    with Client("http://api.test", "tok", transport=transport) as client:
        return client.download_model("j1", tmp_path / "dl")


def _adapter(base: str) -> str:
    return json.dumps({"peft_type": "PREFIX_TUNING", "base_model_name_or_path": base})


def test_a_bundled_base_is_repointed_to_the_download(tmp_path: Path) -> None:
    folder = _download(
        tmp_path,
        {"final/adapter_config.json": _adapter(CLUSTER_BASE), "final/base/config.json": "{}"},
    )
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str((folder / "base").resolve())
    assert config["peft_type"] == "PREFIX_TUNING"  # the rest is kept


def test_a_named_base_is_left_alone(tmp_path: Path) -> None:
    folder = _download(tmp_path, {"final/adapter_config.json": _adapter("org/model")})
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "org/model"


def test_a_step_checkpoint_is_asked_for_by_its_number(tmp_path: Path) -> None:
    body = _tar({"j1-40/config.json": "{}", "j1-40/model.safetensors": "x"})
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(200, content=body)

    with Client("http://api.test", "tok", transport=httpx.MockTransport(handler)) as client:
        folder = client.download_model("j1", tmp_path / "dl", checkpoint=40)
    assert seen == ["/v1/jobs/j1/checkpoints/40/download"]
    assert folder == tmp_path / "dl" / "j1-40" and (folder / "config.json").is_file()


def test_a_fine_tuned_model_name_resolves_to_its_job_and_step() -> None:
    name = fine_tuned_model_name("tiny:v2", "alpha", "adder", "job-01ABC", step=40)
    assert name == "ft:tiny:v2:alpha:adder:01ABC:ckpt-step-40"
    assert model_ref(name) == ("job-01ABC", "40")
    assert model_ref(fine_tuned_model_name("tiny", "alpha", None, "job-01ABC")) == (
        "job-01ABC",
        "final",
    )
    assert model_ref("job-01ABC") is None and model_ref("ft:tiny:01ABC") is None
