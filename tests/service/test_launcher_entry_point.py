"""The launcher comes by entry point (``shunter.launchers``), not by an import string."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from service.launch import LAUNCHER_GROUP, InMemoryLauncher, load_launcher
from service.settings import Settings


def test_the_default_launcher_is_the_installed_ray_entry_point() -> None:
    assert Settings().launcher == "ray"
    (point,) = entry_points(group=LAUNCHER_GROUP).select(name="ray")
    assert point.value == "launcher.ray_launcher:from_settings"
    assert callable(point.load())  # resolves without starting anything


def test_memory_and_an_unknown_name() -> None:
    assert isinstance(load_launcher("memory", Settings()), InMemoryLauncher)
    with pytest.raises(ValueError, match=r"'nope'.*installed: \['ray', 'memory'\]"):
        load_launcher("nope", Settings())
