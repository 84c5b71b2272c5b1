"""``Client.download_model`` of an adapter that came with its base (``final/base/``): the
unpacked ``adapter_config.json`` names the downloaded base, not the cluster's path."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import httpx

from shunter.client import Client

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
