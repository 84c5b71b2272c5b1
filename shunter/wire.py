"""What the Ray-side job code (``worker``) and the service-side launcher (``launcher``) agree on.

The two run in different processes and never import each other: the launcher starts
``python -m worker.probe`` / ``python -m worker.stack_dump`` as Ray jobs and reads their
answers from the job's log, one line that starts with the prefix below and carries JSON.
"""

from __future__ import annotations

__all__ = ["PROBE_PREFIX", "STACKS_PREFIX", "STACK_TARGETS_ENV"]

# A storage probe's answer: ``shunter-probe:{...}`` (worker.probe).
PROBE_PREFIX = "shunter-probe:"
# A stack dump's answer: ``shunter-stacks:{...}`` (worker.stack_dump).
STACKS_PREFIX = "shunter-stacks:"
# The processes a stack dump should read, as JSON, in the dump job's environment.
STACK_TARGETS_ENV = "SHUNTER_STACK_TARGETS"
