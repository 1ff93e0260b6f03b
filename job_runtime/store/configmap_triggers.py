"""Manual checkpoint requests through annotations of the job's checkpoint ConfigMap.

The operator sets ``checkpointed.io/checkpoint-request`` to a nonce; the driver
answers with ``checkpointed.io/checkpoint-request-ack: <nonce>:<checkpoint id>``
once that checkpoint completed. A plain merge patch is enough for the answer:
it touches only its own annotation, never the pointers or the fence.
"""

from __future__ import annotations

from typing import Any

from job_runtime.store.configmap_client import core_v1_api, new_api_client
from job_runtime.store.triggers import TriggerSource

REQUEST_ANNOTATION = "checkpointed.io/checkpoint-request"
ACK_ANNOTATION = "checkpointed.io/checkpoint-request-ack"


class ConfigMapTriggerSource(TriggerSource):
    def __init__(self, *, api: Any, namespace: str, name: str) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name

    def _annotations(self) -> dict[str, str]:
        obj = self.api.read_namespaced_config_map(self.name, self.namespace)
        return dict(obj.metadata.annotations or {})

    def requested(self) -> str | None:
        return self._annotations().get(REQUEST_ANNOTATION) or None

    def acknowledged(self) -> str | None:
        ack = self._annotations().get(ACK_ANNOTATION)
        return ack.rsplit(":", 1)[0] if ack else None

    def pending(self) -> str | None:
        annotations = self._annotations()
        nonce = annotations.get(REQUEST_ANNOTATION)
        ack = annotations.get(ACK_ANNOTATION)
        if nonce and (not ack or ack.rsplit(":", 1)[0] != nonce):
            return nonce
        return None

    def acknowledge(self, *, nonce: str, checkpoint_id: int) -> None:
        body = {"metadata": {"annotations": {ACK_ANNOTATION: f"{nonce}:{checkpoint_id}"}}}
        self.api.patch_namespaced_config_map(self.name, self.namespace, body)


def open_configmap_triggers(*, namespace: str, name: str) -> ConfigMapTriggerSource:
    return ConfigMapTriggerSource(api=core_v1_api(new_api_client()), namespace=namespace,
                                  name=name)
