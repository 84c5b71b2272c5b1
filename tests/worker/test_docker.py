"""What can be checked of ``docker/`` without Docker: the compose file parses and wires the
services together, every path the Dockerfiles COPY exists, the pins match pyproject, and the
images' commands run here (``shunter serve --help``, ``ray start --help``, the driver module)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
BIN = Path(sys.executable).parent


def _compose() -> dict:  # type: ignore[type-arg]
    out: dict = yaml.safe_load((DOCKER / "compose.yaml").read_text())  # type: ignore[type-arg]
    return out


def test_compose_wires_postgres_api_and_ray() -> None:
    c = _compose()
    assert set(c["services"]) == {"postgres", "api", "ray-head", "ray-worker"}
    api = c["services"]["api"]
    env = api["environment"]
    assert env["SHUNTER_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert env["SHUNTER_RAY_ADDRESS"] == "http://ray-head:8265"
    assert env["RAY_AUTH_MODE"] == "token"  # token auth stays on
    assert api["depends_on"]["postgres"]["condition"] == "service_healthy"
    head_cmd = " ".join(c["services"]["ray-head"]["command"])
    assert "--port=6380" in head_cmd and "6379" not in head_cmd  # a Redis may hold 6379
    worker_cmd = " ".join(c["services"]["ray-worker"]["command"])
    assert "--address=ray-head:6380" in worker_cmd
    for name in ("api", "ray-head", "ray-worker"):  # one shared storage path everywhere
        assert "storage:/storage" in c["services"][name]["volumes"]
    assert all(p.startswith("127.0.0.1:") for p in api["ports"])


def test_dockerfiles_copy_existing_paths_and_pin_like_pyproject() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    base = re.compile(r"\[.*\]")
    pins = dict(re.match(r"([a-zA-Z0-9_\-\[\],]+)==(\S+)", d).groups() for d in deps if "==" in d)  # type: ignore[union-attr]
    for df in ("api.Dockerfile", "worker.Dockerfile"):
        text = (DOCKER / df).read_text()
        for src in re.findall(r"^COPY (\S+)", text, flags=re.M):
            assert (REPO / src).exists(), f"{df}: COPY {src} does not exist"
        for name, version in re.findall(r'"([a-zA-Z0-9_\-\[\],]+)==([^"]+)"', text):
            name = base.sub("", name)
            pins = {base.sub("", k): v for k, v in pins.items()}
            assert pins.get(name) == version, (
                f"{df}: {name}=={version} vs pyproject {pins.get(name)}"
            )


def _ok(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_image_commands_run_here() -> None:
    assert "--port" in _ok(str(BIN / "shunter"), "serve", "--help")
    assert "--block" in _ok(str(BIN / "ray"), "start", "--help")
    _ok(sys.executable, "-c", "import worker.driver, worker.launcher, worker.train_fn")
