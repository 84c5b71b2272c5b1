"""A sweep's trials are checked against the admin's accelerator catalog, as a submit is
(issue 30): a type only the admin names is known, and its card memory narrows the trial's
``resources.accelerator`` to the cards that hold the plan. Before, ``check_trial`` dropped
the catalog: such a type was unknown (422) and a trial asking for any type kept null, so it
could be placed on a card too small for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from service.errors import Unprocessable
from service.home import seed_home
from service.jobs.submit import SubmitContext
from service.launch import ClusterResources, NodeResources
from service.sweeps.submit import check_trial
from tests.service.svc_helpers import tiny_spec

# The tiny model's plan is a few MB a GPU: "small" cards (about 1 KB) hold none of it.
TYPES = {"small": {"memory_gb": 1e-6, "weight": 1.0}, "big": {"memory_gb": 1.0, "weight": 2.5}}


def _node(node_id: str, accelerator: str) -> NodeResources:
    return NodeResources(
        node_id=node_id,
        address="10.0.0.1",
        alive=True,
        total_cpus=8,
        free_cpus=8,
        total_gpus=4,
        free_gpus=4,
        accelerator=accelerator,
    )


def _trial(accelerator: Any = None) -> dict[str, Any]:
    s = tiny_spec("trial")
    s["resources"] = {"num_workers": 1, "gpus_per_worker": 1, "cpus_per_worker": 1}
    if accelerator is not None:
        s["resources"]["accelerator"] = accelerator
    return s


@pytest.fixture
def checks(make_settings: Callable[..., Any]) -> SubmitContext:
    settings = make_settings(accelerator_types=TYPES)
    # Ray names the nodes' types; only the admin's catalog says how big their cards are.
    cluster = ClusterResources(nodes=[_node("n-small", "small"), _node("n-big", "big")])
    seed_home(settings)  # the bundled tokenizer, as an app's start links it
    return SubmitContext.from_settings(settings, team_roots=[], cluster=cluster)


def test_a_trial_is_narrowed_to_the_admin_types_whose_card_holds_it(
    checks: SubmitContext,
) -> None:
    assert check_trial(_trial(), checks).resources.accelerator == ["big"]
    assert check_trial(_trial(["small", "big"]), checks).resources.accelerator == ["big"]


def test_a_trial_no_admin_card_holds_is_refused_naming_the_card(checks: SubmitContext) -> None:
    with pytest.raises(Unprocessable) as got:
        check_trial(_trial("small"), checks)
    text = str(got.value.detail)
    assert "resources.accelerator" in text and "largest card asked for is small" in text
