"""The code and package versions of this process: recorded with each job so a run can be
reproduced (the service at submit, the worker's driver when the attempt starts: the versions
that actually ran). ``importlib.metadata`` only: nothing heavy is imported."""

from __future__ import annotations

import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

__all__ = ["PACKAGES", "code_version", "installed_versions"]

# The packages whose versions decide what a run computes.
PACKAGES = ("torch", "transformers", "datasets", "accelerate", "peft", "deepspeed", "numpy")
_REPO = Path(__file__).resolve().parents[1]


@lru_cache(maxsize=1)
def code_version() -> str:
    """``git:<describe>`` of the checkout this code runs from, else ``shunter <version>`` of
    the installed package (computed once per process)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(_REPO), "describe", "--always", "--dirty", "--tags"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        if out.returncode == 0 and out.stdout.strip():
            return "git:" + out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return "shunter " + metadata.version("shunter")
    except metadata.PackageNotFoundError:
        return "unknown"


def installed_versions() -> dict[str, object]:
    """``{code_version, python, packages: {name: version}}``; packages not installed are left
    out."""
    packages: dict[str, str] = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "code_version": code_version(),
        "python": sys.version.split()[0],
        "packages": packages,
    }
