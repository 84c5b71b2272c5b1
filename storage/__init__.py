"""Job storage, shared by the service and the Ray-side job code (neither owns it).

``storage.objects``: how a storage URI (a path or ``s3://bucket/prefix``) becomes files to read,
write, list and delete. ``storage.layout``: where a job's checkpoints and models live in it.
This package imports nothing of ours, so the Ray side never depends on the server package.
"""

from storage.layout import (
    CHECKPOINT_MODEL_DIR,
    CHECKPOINT_MODEL_FILES,
    CHECKPOINT_MODEL_MARK,
    CHECKPOINT_PREFIX,
    OBJECT_PREFIX,
    TOKENIZED_PREFIX,
    checkpoint_name,
    checkpoint_step,
    object_dir,
)
from storage.objects import (
    STORAGE_ENV,
    RangeReader,
    StorageUnavailable,
    delete_tree,
    download_dir,
    exists,
    is_remote,
    is_transient,
    join,
    list_files,
    open_ranges,
    open_read,
    read_bytes,
    resolve,
    storage_error,
    to_uri,
    upload_dir,
    write_bytes,
)

__all__ = [
    "CHECKPOINT_MODEL_DIR",
    "CHECKPOINT_MODEL_FILES",
    "CHECKPOINT_MODEL_MARK",
    "CHECKPOINT_PREFIX",
    "OBJECT_PREFIX",
    "STORAGE_ENV",
    "TOKENIZED_PREFIX",
    "RangeReader",
    "StorageUnavailable",
    "checkpoint_name",
    "checkpoint_step",
    "delete_tree",
    "download_dir",
    "exists",
    "is_remote",
    "is_transient",
    "join",
    "list_files",
    "object_dir",
    "open_ranges",
    "open_read",
    "read_bytes",
    "resolve",
    "storage_error",
    "to_uri",
    "upload_dir",
    "write_bytes",
]
