"""A standby driver's promotion, as the operator records it on the checkpoint ConfigMap.

The operator promotes a standby pod by setting the annotation
:data:`~cjob_spec.standby_signal.PROMOTION_ANNOTATION` of the job's checkpoint
ConfigMap, after it advanced the same ConfigMap's fence to the new attempt. The
standby watches that one object (a watch narrowed to it by name, which its Role may
do without any right on other ConfigMaps), so it hears of the promotion within the
API server's watch latency instead of a polling period, at the cost of one idle
connection while it waits.

Like the checkpoint requests (:mod:`.configmap_triggers`), this needs no network path
from the operator to the pod and no right the driver does not already have.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from cjob_checkpoint.keyword_error import keyword_error
from cjob_checkpoint.store.configmap_client import (
    DEFAULT_REQUEST_TIMEOUT,
    core_v1_api,
    new_api_client,
)
from cjob_spec.standby_signal import PROMOTION_ANNOTATION, StandbyPromotion, StandbySignalError

log = logging.getLogger(__name__)

REFUSED = frozenset({401, 403, 404})
"""Answers that waiting longer cannot change: no right to watch, or no store at all."""
RETRY_SECONDS = 1.0
"""Pause after a failed watch before the next (the API server may be restarting)."""


@keyword_error
class PromotionRefusedError(StandbySignalError):
    """The standby may not watch its store, or the store is gone: it can never be promoted.

    A :class:`StandbySignalError`, as an unreadable promotion is: the standby stops
    with the sentence instead of waiting for what cannot come."""

    where: str
    status: int
    reason: str

    def describe(self) -> str:
        return f"cannot watch {self.where} for a promotion: {self.status} {self.reason}"


class ConfigMapPromotionWatch:
    """Waits for a promotion of ``pod`` to ``min_attempt`` or later on one ConfigMap.

    A promotion naming another pod, or an older attempt, is not this standby's: the
    annotation holds only the operator's latest promotion, which may be of a standby
    that came before.

    ``on_annotations`` sees the ConfigMap's annotations on every change while a wait
    lasts: the standby reads the active driver's beacon address from the same watch.
    """

    def __init__(self, *, api: Any, namespace: str, name: str, pod: str,
                 min_attempt: int,
                 on_annotations: Callable[[Mapping[str, str]], None] | None = None) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.pod = pod
        self.min_attempt = min_attempt
        self.on_annotations = on_annotations

    @property
    def where(self) -> str:
        return f"configmap:{self.namespace}/{self.name}"

    def mine(self, text: str | None) -> StandbyPromotion | None:
        """The promotion ``text`` records, if it is this standby's.

        A text this release cannot read raises
        :class:`~cjob_spec.standby_signal.StandbySignalError` when it names this pod
        (never a guess at the attempt), and is ignored when it names another.
        """
        if not text:
            return None
        try:
            promotion = StandbyPromotion.decode(text)
        except ValueError:
            if f'"{self.pod}"' in text:
                raise
            return None
        if promotion.pod != self.pod or promotion.attempt < self.min_attempt:
            return None
        return promotion

    def wait(self, *, seconds: float) -> StandbyPromotion | None:
        """This standby's promotion, if it is recorded now or within ``seconds``.

        A watch without a resource version first delivers the object as it is, so a
        promotion written before the watch started is seen as well.
        """
        deadline = time.monotonic() + seconds
        factory: Any = watch.Watch  # the client's watch is untyped
        stream: Any = factory()
        try:
            for event in stream.stream(
                    self.api.list_namespaced_config_map, self.namespace,
                    field_selector=f"metadata.name={self.name}",
                    timeout_seconds=max(1, int(seconds)),
                    _request_timeout=(DEFAULT_REQUEST_TIMEOUT[0], seconds + 10)):
                obj = event.get("object")
                metadata = getattr(obj, "metadata", None)
                annotations = dict(getattr(metadata, "annotations", None) or {})
                if self.on_annotations is not None:
                    self.on_annotations(annotations)
                promotion = self.mine(annotations.get(PROMOTION_ANNOTATION))
                if promotion is not None:
                    return promotion
                if time.monotonic() >= deadline:
                    break
        except StandbySignalError:
            raise
        except ApiException as exc:
            if exc.status in REFUSED:
                raise PromotionRefusedError(where=self.where, status=int(exc.status),
                                            reason=str(exc.reason)) from None
            self._pause_after(f"{exc.status} {exc.reason}", deadline=deadline)
        except Exception as exc:  # a broken connection: watch again
            self._pause_after(str(exc), deadline=deadline)
        finally:
            stream.stop()
        return None


    def _pause_after(self, failure: str, *, deadline: float) -> None:
        """A watch that failed for a reason time may mend: say so, pause, watch again."""
        log.warning("standby: watching %s failed (%s); watching again", self.where, failure)
        time.sleep(min(RETRY_SECONDS, max(0.0, deadline - time.monotonic())))


def open_promotion_watch(
    *, namespace: str, name: str, pod: str, min_attempt: int,
    on_annotations: Callable[[Mapping[str, str]], None] | None = None,
) -> ConfigMapPromotionWatch:
    api = core_v1_api(new_api_client(where=f"configmap:{namespace}/{name}"))
    return ConfigMapPromotionWatch(api=api, namespace=namespace, name=name, pod=pod,
                                   min_attempt=min_attempt, on_annotations=on_annotations)
