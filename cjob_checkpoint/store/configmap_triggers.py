"""Manual checkpoint requests through annotations of the job's checkpoint ConfigMap.

The operator sets ``checkpointed.io/checkpoint-request`` to a nonce; the driver
answers with ``checkpointed.io/checkpoint-request-ack: <nonce>:<checkpoint id>``
once that checkpoint completed. A plain merge patch is enough for the answer:
it touches only its own annotation, never the pointers or the fence.
"""

from __future__ import annotations

from typing import Any

from cjob_checkpoint.store.configmap_client import (
    DEFAULT_REQUEST_TIMEOUT,
    core_v1_api,
    new_api_client,
)
from cjob_checkpoint.store.triggers import TriggerSource

REQUEST_ANNOTATION = "checkpointed.io/checkpoint-request"
ACK_ANNOTATION = "checkpointed.io/checkpoint-request-ack"


class ConfigMapTriggerSource(TriggerSource):
    """Reads and answers requests with one bounded call each (connect and read timeouts).

    No retries here: the coordinator polls again a few seconds later anyway.
    """

    def __init__(self, *, api: Any, namespace: str, name: str,
                 request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.request_timeout = request_timeout

    def _annotations(self) -> dict[str, str]:
        obj = self.api.read_namespaced_config_map(self.name, self.namespace,
                                                  _request_timeout=self.request_timeout)
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
        self.api.patch_namespaced_config_map(self.name, self.namespace, body,
                                             _request_timeout=self.request_timeout)


def open_configmap_triggers(*, namespace: str, name: str) -> ConfigMapTriggerSource:
    api = core_v1_api(new_api_client(where=f"configmap:{namespace}/{name}"))
    return ConfigMapTriggerSource(api=api, namespace=namespace,
                                  name=name)
