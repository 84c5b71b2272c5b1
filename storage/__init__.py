"""Job storage, shared by the service and the Ray-side job code (neither owns it).

``storage.objects``: how a storage URI (a path or ``s3://bucket/prefix``) becomes files to read,
write, list and delete. ``storage.layout``: where a job's checkpoints and models live in it.
This package imports nothing of ours, so the Ray side never depends on the server package.
"""

# The facade's names are its two modules' ``__all__`` (each list written once, there).
from storage.layout import *  # noqa: F403
from storage.objects import *  # noqa: F403
