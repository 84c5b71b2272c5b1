"""``python -m worker.probe --storage PATH``: what ``shunter doctor`` asks a Ray worker.

Runs as a Ray job on the cluster (on a GPU node when the cluster has GPUs) and prints one JSON
line, prefixed ``shunter-probe:``: whether the job storage is writable from there (a probe
file, or on object storage a probe object written, read back and deleted), the GPUs
that node's processes see, the Hugging Face cache and whether the Hub answers, and the Ray
version of the node. Never raises: a failed check is a value in the report.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import urllib.request
from importlib.metadata import version
from pathlib import Path
from typing import Any

import storage
from shunter.wire import PROBE_PREFIX

__all__ = ["PREFIX", "probe"]

PREFIX = PROBE_PREFIX


def _storage(path: str) -> dict[str, Any]:
    if storage.is_remote(path):
        return _object_store(path)
    probe = Path(path) / f".doctor-{secrets.token_hex(4)}"
    try:
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok")
        ok = probe.read_text() == "ok"
        probe.unlink()
        return {"writable": ok, "error": None}
    except OSError as e:
        return {"writable": False, "error": f"{type(e).__name__}: {e}"}


def _object_store(uri: str) -> dict[str, Any]:
    """Write, read back and delete a probe object under the storage prefix."""
    probe = storage.join(uri, f".doctor-{secrets.token_hex(4)}")
    try:
        storage.write_bytes(probe, b"ok")
        ok = storage.read_bytes(probe) == b"ok"
        storage.delete_tree(probe)
        return {"writable": ok and not storage.exists(probe), "error": None}
    except Exception as e:  # any store failure (credentials, endpoint, bucket) is the answer
        return {"writable": False, "error": f"{type(e).__name__}: {e}"}


def _gpus() -> dict[str, Any]:
    try:
        import torch
    except ImportError as e:
        return {"count": 0, "error": f"torch not importable: {e}"}
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = [torch.cuda.get_device_name(i) for i in range(count)]
    return {"count": count, "names": names, "cuda": torch.version.cuda, "error": None}


def _hub() -> dict[str, Any]:
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    writable = _storage(str(home))["writable"]
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return {
            "hf_home": str(home),
            "cache_writable": writable,
            "hub": "offline (HF_HUB_OFFLINE=1)",
        }
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        with urllib.request.urlopen(f"{endpoint}/api/models?limit=1", timeout=5) as r:
            hub = "reachable" if r.status == 200 else f"HTTP {r.status}"
    except Exception as e:  # any network failure is the answer, not a crash
        hub = f"unreachable: {type(e).__name__}"
    return {"hf_home": str(home), "cache_writable": writable, "hub": hub}


def probe(storage: str) -> dict[str, Any]:
    return {
        "ray_version": version("ray"),
        "python": sys.version.split()[0],
        "storage": _storage(storage),
        "gpus": _gpus(),
        "hf": _hub(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--storage", required=True)
    args = parser.parse_args()
    print(PREFIX + json.dumps(probe(args.storage)), flush=True)


if __name__ == "__main__":
    main()
