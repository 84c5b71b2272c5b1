"""What the Ray-side job code (``worker``) and the service-side launcher (``launcher``) agree on.

The two run in different processes and never import each other:

- the launcher puts an attempt's identity in its Ray job's environment (``attempt_env``); the
  driver and every rank read it back (``attempt_identity``);
- the launcher starts ``python -m worker.probe`` / ``python -m worker.stack_dump`` as Ray jobs
  and reads their answers from the job's log, one line that starts with a prefix below and
  carries JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "API_URL_ENV",
    "ATTEMPT_ENV",
    "ATTEMPT_TOKEN_ENV",
    "JOB_ID_ENV",
    "ONLY_NODES_ENV",
    "PER_ATTEMPT_ENV",
    "PROBE_PREFIX",
    "RAY_GCS_ADDRESS_ENV",
    "STACKS_PREFIX",
    "STACK_TARGETS_ENV",
    "attempt_env",
    "attempt_identity",
]

# An attempt's identity in its Ray job's environment: where the internal API is, and the
# attempt token that authenticates every report (docs/contracts.md).
API_URL_ENV = "SHUNTER_API_URL"
ATTEMPT_TOKEN_ENV = "SHUNTER_ATTEMPT_TOKEN"
JOB_ID_ENV = "SHUNTER_JOB_ID"
ATTEMPT_ENV = "SHUNTER_ATTEMPT"
# The nodes an attempt's workers may use, comma-separated node ids: those of the accelerator
# type the scheduler placed it on (issue 30); absent: any node.
ONLY_NODES_ENV = "SHUNTER_ONLY_NODES"
# The names that differ from one attempt to the next (a warm process must not keep them).
PER_ATTEMPT_ENV = (JOB_ID_ENV, ATTEMPT_ENV, ATTEMPT_TOKEN_ENV, ONLY_NODES_ENV)
# The cluster the attempt was submitted to (the job supervisor overwrites RAY_ADDRESS).
RAY_GCS_ADDRESS_ENV = "SHUNTER_RAY_GCS_ADDRESS"

# A storage probe's answer: ``shunter-probe:{...}`` (worker.probe).
PROBE_PREFIX = "shunter-probe:"
# A stack dump's answer: ``shunter-stacks:{...}`` (worker.stack_dump).
STACKS_PREFIX = "shunter-stacks:"
# The processes a stack dump should read, as JSON, in the dump job's environment.
STACK_TARGETS_ENV = "SHUNTER_STACK_TARGETS"


def attempt_env(*, api_url: str, token: str, job_id: str, attempt: int) -> dict[str, str]:
    """The launcher's side: the attempt's identity as environment variables."""
    return {
        API_URL_ENV: api_url,
        ATTEMPT_TOKEN_ENV: token,
        JOB_ID_ENV: job_id,
        ATTEMPT_ENV: str(attempt),
    }


def attempt_identity(env: Mapping[str, str]) -> dict[str, Any]:
    """The Ray side's: ``api_url``, ``token``, ``job_id``, ``attempt`` (the internal API
    client's keyword arguments) from the environment the launcher set."""
    return {
        "api_url": env[API_URL_ENV],
        "token": env[ATTEMPT_TOKEN_ENV],
        "job_id": env[JOB_ID_ENV],
        "attempt": int(env[ATTEMPT_ENV]),
    }
