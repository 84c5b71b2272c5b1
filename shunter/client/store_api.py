"""The store endpoints of :class:`shunter.client.Client`: a team's datasets (``ds-...``) and
base models (``mdl-...``), the same four calls for each kind."""

from __future__ import annotations

import builtins
from pathlib import Path

import httpx

from shunter.client.objects import StoredObject, upload_parts
from shunter.client.transport import Transport

__all__ = ["StoreAPI"]


class StoreAPI(Transport):
    """``/v1/datasets/...`` and ``/v1/models/...``."""

    def _push(self, path: str, local: str | Path, name: str | None) -> StoredObject:
        parts = upload_parts(Path(local))
        try:
            data = {"name": name} if name else {}
            # Streamed from disk; no read/write timeout: a large model takes as long as it takes.
            timeout = httpx.Timeout(self._http.timeout.connect, read=None, write=None, pool=None)
            body = self._json("POST", path, files=parts, data=data, timeout=timeout)
        finally:
            for _, (_, handle) in parts:
                handle.close()
        return StoredObject.model_validate(body)

    def _stored(self, path: str) -> StoredObject:
        return StoredObject.model_validate(self._json("GET", path))

    def push_dataset(self, local: str | Path, *, name: str | None = None) -> StoredObject:
        """Upload a dataset file or folder (checked by the server: format, columns, rows)."""
        return self._push("/v1/datasets", local, name)

    def datasets(self) -> builtins.list[StoredObject]:
        return list(self._pages("/v1/datasets", StoredObject, {}))

    def dataset(self, dataset_id: str) -> StoredObject:
        return self._stored(f"/v1/datasets/{dataset_id}")

    def delete_dataset(self, dataset_id: str) -> None:
        self._request("DELETE", f"/v1/datasets/{dataset_id}")

    def push_model(self, local: str | Path, *, name: str | None = None) -> StoredObject:
        """Upload an HF-layout model folder (config.json, *.safetensors, tokenizer files)."""
        return self._push("/v1/models", local, name)

    def uploaded_models(self) -> builtins.list[StoredObject]:
        return list(self._pages("/v1/models/uploaded", StoredObject, {}))

    def uploaded_model(self, model_id: str) -> StoredObject:
        return self._stored(f"/v1/models/{model_id}")

    def delete_model(self, model_id: str) -> None:
        self._request("DELETE", f"/v1/models/{model_id}")
