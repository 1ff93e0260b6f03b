"""The ConfigMap store's object layout and error sorting, without a cluster."""

from __future__ import annotations

import dataclasses
import json
import pickle
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from cjob_checkpoint.store.completed_store import (
    AmbiguousWriteError,
    CompletedCheckpoint,
    StoreFullError,
)
from cjob_checkpoint.store.configmap_client import ConfigMapAccess, is_not_sent
from cjob_checkpoint.store.configmap_errors import (
    AmbiguousConfigMapWriteError,
    ConfigMapStoreFullError,
    CorruptStoreDataError,
    StoreAccessDeniedError,
    StoreConflictError,
    StoreNotFoundError,
    StoreUnavailableError,
)
from cjob_checkpoint.store.configmap_layout import (
    ANNOTATION_STAGED_INPUTS,
    DEFAULT_BUDGET_BYTES,
    StoreObject,
    build_store_configmap,
    marker_key,
    parse_store,
    pointer_key,
)
from cjob_checkpoint.store.file import CorruptPointerError
from cjob_spec.driver_beacon import DRIVER_LOST_ANNOTATION, DriverLost


def pointer(checkpoint_id: int) -> CompletedCheckpoint:
    return CompletedCheckpoint(checkpoint_id=checkpoint_id,
                               metadata_path=f"s3://ckpt/job-uid/chk-{checkpoint_id}/_metadata",
                               timestamp=1000.0 + checkpoint_id, size_bytes=10, attempt=1)


def configmap(data: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "clicks-checkpoints", "namespace": "analytics",
                     "resourceVersion": "17", "annotations": annotations or {},
                     "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
        "data": data,
    }


class TestKeysAndPointers:
    def test_keys_follow_the_name_contract(self) -> None:
        assert pointer_key(42) == "checkpointID-0000000000000000042"
        assert marker_key(42) == "discarding-0000000000000000042"

    def test_a_snapshot_lists_live_pointers_oldest_first_and_skips_marked_ones(self) -> None:
        obj = StoreObject(configmap({}))
        for checkpoint_id in (7, 3, 5):
            obj.put_pointer(pointer(checkpoint_id))
        obj.mark(3, attempt=1, at=5.0)
        obj.set_counter(8)
        snapshot = parse_store(obj.body())
        assert [c.checkpoint_id for c in snapshot.checkpoints] == [5, 7]
        assert snapshot.marked == (3,)
        assert snapshot.latest == pointer(7)
        assert snapshot.counter == 8
        assert snapshot.resource_version == "17"

    def test_re_adding_a_marked_pointer_unmarks_it(self) -> None:
        obj = StoreObject(configmap({}))
        obj.put_pointer(pointer(3))
        obj.mark(3, attempt=1, at=5.0)
        obj.put_pointer(pointer(3))
        assert obj.live_ids() == [3]

    def test_a_damaged_pointer_is_reported_with_its_key(self) -> None:
        obj = StoreObject(configmap({pointer_key(4): '{"id": 4, "pa', pointer_key(5):
                                     pointer(6).to_json()}))
        snapshot = obj.snapshot()
        assert snapshot.checkpoints == ()
        causes = {c.checkpoint_id: c.cause for c in snapshot.corrupt}
        assert "not a valid checkpoint pointer" in causes[4]
        assert "names checkpoint 6" in causes[5]
        assert all(c.path.endswith(f"#{pointer_key(c.checkpoint_id)}") for c in snapshot.corrupt)
        with pytest.raises(CorruptPointerError):
            obj.pointer(4)

    def test_unrelated_keys_are_ignored(self) -> None:
        snapshot = parse_store(configmap({"notes": "hello", "checkpointID-12": "x"}))
        assert snapshot.checkpoints == () and snapshot.corrupt == ()


class TestFenceAndCounter:
    def test_a_missing_fence_means_attempt_zero(self) -> None:
        assert StoreObject(configmap({})).fence_attempt == 0

    def test_the_fence_is_read_from_its_annotation(self) -> None:
        obj = StoreObject(configmap({}, {"checkpointed.io/fence-attempt": "4"}))
        assert obj.fence_attempt == 4

    @pytest.mark.parametrize("value", ["four", "-1", ""])
    def test_a_damaged_fence_is_an_error_not_a_guess(self, value: str) -> None:
        obj = StoreObject(configmap({}, {"checkpointed.io/fence-attempt": value}))
        with pytest.raises(CorruptStoreDataError, match="fence-attempt"):
            _ = obj.fence_attempt

    def test_a_damaged_counter_is_an_error_not_a_guess(self) -> None:
        with pytest.raises(CorruptStoreDataError, match="counter"):
            parse_store(configmap({"counter": "lots"}))

    def test_the_next_id_is_above_every_pointer_even_when_the_counter_lags(self) -> None:
        obj = StoreObject(configmap({"counter": "3"}))
        obj.put_pointer(pointer(9))
        obj.mark(9, attempt=1, at=0.0)
        assert obj.snapshot().next_checkpoint_id() == 10

    def test_the_next_id_follows_the_counter_when_it_is_ahead(self) -> None:
        obj = StoreObject(configmap({"counter": "30"}))
        obj.put_pointer(pointer(9))
        assert obj.snapshot().next_checkpoint_id() == 30
        assert StoreObject(configmap({})).snapshot().next_checkpoint_id(start=1) == 1


class TestStandbyReport:
    def test_a_standbys_report_that_the_driver_is_lost_is_read_with_the_store(self) -> None:
        report = DriverLost(attempt=3, pod="clicks-standby-3", at=1_700_000_000.5,
                            detail="its connection closed")
        snapshot = parse_store(configmap({}, {DRIVER_LOST_ANNOTATION: report.encode()}))
        assert snapshot.driver_lost == report
        assert parse_store(configmap({})).driver_lost is None

    @pytest.mark.parametrize("text", ["", "{", '{"version": 9}', "[]",
                                      '{"version": 1, "attempt": 3, "at": 1, "detail": ""}',
                                      '{"version": 1, "attempt": 3, "pod": "p", "detail": "",'
                                      ' "at": 1' + "0" * 400 + '}'])
    def test_a_report_that_cannot_be_read_is_no_report(self, text: str) -> None:
        # A newer release's, or garbage: the kubelet's report of the driver's end still comes.
        assert parse_store(configmap({}, {DRIVER_LOST_ANNOTATION: text})).driver_lost is None


class TestStagedInputs:
    def test_the_published_inputs_live_in_an_annotation_and_survive_other_changes(
            self) -> None:
        text = '{"inputs":{},"version":1}'
        obj = StoreObject(configmap({pointer_key(1): pointer(1).to_json()},
                                    {ANNOTATION_STAGED_INPUTS: text}))

        state = obj.state()
        changed = obj.with_state(dataclasses.replace(state, counter=5))

        assert state.staged_inputs == text
        assert changed.annotations[ANNOTATION_STAGED_INPUTS] == text
        assert ANNOTATION_STAGED_INPUTS not in changed.data
        assert StoreObject(configmap({})).state().staged_inputs is None


class TestBody:
    def test_the_written_body_keeps_the_resource_version_and_drops_managed_fields(self) -> None:
        body = StoreObject(configmap({})).body()
        assert body["metadata"]["resourceVersion"] == "17"
        assert "managedFields" not in body["metadata"]

    def test_the_size_grows_with_each_pointer(self) -> None:
        obj = StoreObject(configmap({}))
        before = obj.size_bytes
        obj.put_pointer(pointer(1))
        assert obj.size_bytes - before >= len(pointer(1).to_json()) + len(pointer_key(1))
        assert obj.size_bytes < DEFAULT_BUDGET_BYTES

    def test_a_new_store_is_labelled_fenced_at_zero_and_owned_by_its_job(self) -> None:
        owner = {"apiVersion": "checkpointed.io/v1alpha1", "kind": "CheckpointedJob",
                 "name": "clicks", "uid": "u-1", "controller": True}
        body = build_store_configmap(namespace="analytics", name="clicks-checkpoints",
                                     job_name="clicks", owner_reference=owner,
                                     labels={"app.kubernetes.io/managed-by": "x"})
        assert body["metadata"]["labels"] == {"checkpointed.io/job": "clicks",
                                              "app.kubernetes.io/managed-by": "x"}
        assert body["metadata"]["annotations"] == {"checkpointed.io/fence-attempt": "0"}
        assert body["metadata"]["ownerReferences"] == [owner]
        assert body["data"] == {}


class TestErrors:
    def test_errors_survive_pickling_with_their_fields(self) -> None:
        errors = [
            StoreUnavailableError(namespace="n", name="c", operation="read", cause="refused"),
            StoreNotFoundError(namespace="n", name="c"),
            ConfigMapStoreFullError(namespace="n", name="c", size_bytes=9, budget_bytes=8,
                                    pointers=3),
            AmbiguousConfigMapWriteError(namespace="n", name="c", operation="commit",
                                         cause="timeout"),
            StoreConflictError(namespace="n", name="c", operation="commit", attempts=3),
        ]
        for error in errors:
            copy = pickle.loads(pickle.dumps(error))
            assert type(copy) is type(error) and str(copy) == str(error)

    def test_the_full_and_ambiguous_errors_keep_their_base_meaning(self) -> None:
        full = ConfigMapStoreFullError(namespace="n", name="c", size_bytes=9, budget_bytes=8,
                                       pointers=3)
        assert isinstance(full, StoreFullError) and "lower checkpoint.retained" in str(full)
        assert isinstance(AmbiguousConfigMapWriteError(namespace="n", name="c", operation="x",
                                                       cause="y"), AmbiguousWriteError)

    def test_a_refused_connection_is_known_not_to_have_been_sent(self) -> None:
        refused = urllib3.exceptions.NewConnectionError(None, "refused")  # type: ignore[arg-type]
        wrapped = urllib3.exceptions.MaxRetryError(None, "/x", reason=refused)  # type: ignore[arg-type]
        lost = urllib3.exceptions.MaxRetryError(
            None, "/x", reason=urllib3.exceptions.ProtocolError("Connection aborted."))  # type: ignore[arg-type]
        assert is_not_sent(wrapped)
        assert not is_not_sent(lost)


class _ScriptedApi:
    """Answers ``read``/``replace`` from a script, to check how answers are sorted."""

    def __init__(self, replies: list[Exception | None]) -> None:
        self.replies = replies
        self.replaced: list[dict[str, Any]] = []

    def read_namespaced_config_map(self, name: str, namespace: str, **_: Any) -> Any:
        return _Response(configmap({"counter": str(10 + len(self.replaced))}))

    def replace_namespaced_config_map(self, name: str, namespace: str, body: dict[str, Any],
                                      **_: Any) -> Any:
        reply = self.replies.pop(0)
        if reply is not None:
            raise reply
        self.replaced.append(body)
        return _Response(body)


class _Response:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.data = json.dumps(obj).encode()


def _api_error(status: int) -> ApiException:
    error = ApiException(status=status, reason="x")
    error.body = json.dumps({"message": f"status {status}"})
    return error


def _bump(obj: StoreObject) -> bool:
    obj.set_counter((obj.counter or 0) + 1)
    return True


class TestAnswerSorting:
    def access(self, api: _ScriptedApi) -> ConfigMapAccess:
        return ConfigMapAccess(api=api, namespace="analytics", name="clicks-checkpoints",
                               max_attempts=3)

    def test_a_conflict_is_retried_from_a_fresh_read(self) -> None:
        api = _ScriptedApi([_api_error(409), None])
        written, changed = self.access(api).update(_bump, operation="bump")
        assert changed and written.counter == 11 and len(api.replaced) == 1

    def test_a_server_error_on_a_write_is_ambiguous(self) -> None:
        api = _ScriptedApi([_api_error(503)])
        with pytest.raises(AmbiguousConfigMapWriteError, match="HTTP 503"):
            self.access(api).update(_bump, operation="bump")

    def test_an_ambiguous_write_may_be_retried_when_the_change_allows_it(self) -> None:
        api = _ScriptedApi([_api_error(504), None])
        _, changed = self.access(api).update(_bump, operation="bump", retry_ambiguous=True)
        assert changed

    def test_endless_conflicts_end_in_a_clear_error(self) -> None:
        api = _ScriptedApi([_api_error(409)] * 3)
        with pytest.raises(StoreConflictError, match="3 compare-and-swap attempts"):
            self.access(api).update(_bump, operation="bump")

    def test_forbidden_is_final(self) -> None:
        api = _ScriptedApi([_api_error(403)])
        with pytest.raises(StoreAccessDeniedError, match="HTTP 403"):
            self.access(api).update(_bump, operation="bump")
        assert api.replies == []
