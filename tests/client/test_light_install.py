"""The light install stays light: ``shunter.jobspec``, ``shunter.client`` and the ``shunter``
CLI load none of the server's or the trainer's packages, and ``pip install shunter`` (no
extras) gives a CLI that validates a spec offline.

The fast test runs in this venv (where the heavy packages are installed, so importing one
would show in ``sys.modules``); the slow one builds a fresh venv from a copy of the tracked
files and installs the bare distribution from PyPI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "ray", "deepspeed", "transformers", "fastapi", "sqlalchemy", "datasets")
EXAMPLE = "examples/sst2-minilm.yaml"

# Imports the light packages, runs the CLI's --help and an offline validate in-process, then
# prints which heavy packages got loaded (top-level names only).
_PROBE = f"""
import json, sys
import shunter.jobspec, shunter.client, shunter.cli
from typer.testing import CliRunner
runner = CliRunner()
helped = runner.invoke(shunter.cli.app, ["--help"])
validated = runner.invoke(shunter.cli.app, ["validate", {EXAMPLE!r}])
heavy = {HEAVY!r}
print(json.dumps({{
    "help": [helped.exit_code, helped.output],
    "validate": [validated.exit_code, validated.output],
    "loaded": sorted({{m.split(".")[0] for m in sys.modules}} & set(heavy)),
}}))
"""


def _clean_env(home: Path) -> dict[str, str]:
    """No inherited venv, path or client config: the subprocess sees only what it installs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHUNTER_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)
    env["HOME"] = str(home)
    return env


def test_light_packages_load_no_heavy_package(tmp_path: Path) -> None:
    env = _clean_env(tmp_path)
    env["PYTHONPATH"] = str(REPO)  # this checkout's sources, as pytest sees them
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["help"][0] == 0, report["help"][1]
    assert "validate" in report["help"][1]
    assert report["validate"][0] == 0, report["validate"][1]
    assert report["loaded"] == [], f"the light package loaded {report['loaded']}"
    # The probe would see them: every one of them is importable in this venv.
    for name in ("torch", "fastapi", "sqlalchemy"):
        probe = subprocess.run([sys.executable, "-c", f"import {name}"], env=env, check=False)
        assert probe.returncode == 0, f"{name} is not installed here: the check above is void"


def _copy_tracked(dst: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if src.is_file():  # a tracked file another change deleted is not part of the copy
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


@pytest.mark.slow
def test_bare_install_is_a_working_light_cli(tmp_path: Path) -> None:
    started = time.monotonic()
    src, venv, home = tmp_path / "src", tmp_path / "venv", tmp_path / "home"
    src.mkdir()
    home.mkdir()
    _copy_tracked(src)
    env = _clean_env(home)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], env=env, check=True)
    py, shunter = venv / "bin" / "python", venv / "bin" / "shunter"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)],
        env=env,
        check=True,
        timeout=900,
    )

    def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in args], cwd=src, env=env, capture_output=True, text=True, timeout=120
        )

    assert run(py, "-c", "import torch").returncode != 0, "torch is importable in a bare install"
    listed = run(py, "-m", "pip", "list", "--format=json", "--disable-pip-version-check")
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "shunter" in names
    assert not names & {"torch", "ray", "fastapi", "sqlalchemy", "transformers", "deepspeed"}

    helped = run(shunter, "--help")
    assert helped.returncode == 0, helped.stderr
    assert "validate" in helped.stdout
    served = run(shunter, "serve")  # a stub without [server]: says what to install
    assert served.returncode == 2
    assert "shunter[server]" in served.stderr

    ok = run(shunter, "validate", EXAMPLE)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run(shunter, "validate", EXAMPLE, "--set", "resources.num_workers=0")
    assert bad.returncode != 0
    assert "resources.num_workers" in bad.stdout + bad.stderr
    print(f"bare install + checks: {time.monotonic() - started:.0f} s")
