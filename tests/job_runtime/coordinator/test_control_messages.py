"""The typed control messages: every kind round-trips, and bad input is a clear error."""

from __future__ import annotations

import json

import pytest

from cjob_checkpoint.checkpoint_storage import StateHandle
from cjob_checkpoint.metadata import (
    ChannelStateHandle,
    CheckpointMetadata,
    KeyedStateHandle,
    SharedStateFile,
    SinkTransactions,
)
from job_runtime.coordinator.messages import (
    FORMAT_VERSION,
    Abort,
    Ack,
    AckState,
    AckStats,
    ChannelAddress,
    Complete,
    Decline,
    Done,
    Message,
    MessageError,
    OperatorState,
    Peers,
    Progress,
    Ready,
    Register,
    Registered,
    Rejected,
    SinkFailure,
    SourcesFinished,
    TaskMetrics,
    Trigger,
    UserError,
    decode_to_coordinator,
    decode_to_subtask,
    encode,
)
from job_runtime.sinks.failures import SinkFailureKind
from job_runtime.sinks.health import SinkHealth

HANDLE = StateHandle(uri="file:///ckpt/j/chk-3/reduce/1", size_bytes=120, crc32=77)
METRICS = TaskMetrics(records_in=10, records_out=9, blocked_seconds=0.5, first_record_at=1.5,
                      last_record_at=None, restore_seconds=0.25, rejected_connections=2,
                      sinks=SinkHealth(pending_intervals=2, pending_records=40,
                                       pending_bytes=4096, oldest_pending_seconds=12.5,
                                       dead_letters=1))

TO_COORDINATOR: list[Message] = [
    Register(epoch=4, subtask=1, host="exec-1", pid=321,
             channel=ChannelAddress(host="10.0.0.7", port=40123)),
    Ready(epoch=4, subtask=1),
    SourcesFinished(epoch=4, subtask=0),
    Progress(epoch=4, subtask=1, metrics=METRICS),
    Done(epoch=4, subtask=1, metrics=TaskMetrics()),
    Ack(epoch=4, subtask=1, checkpoint_id=3, stage=1,
        state=AckState(sources={"0": 17, "2": {"file": "a.txt", "offset": 9}},
                       operators={"reduce": OperatorState(handle=HANDLE, key_groups=(0, 64))},
                       channels=HANDLE, sinks={"sink": [[3, "stage", "final", 5]], "late": []}),
        stats=AckStats(sync_ms=1.0, alignment_ms=2.0, async_ms=3.5, bytes=120)),
    Ack(epoch=4, subtask=0, checkpoint_id=3, stage=0, state=AckState(), stats=AckStats()),
    Ack(epoch=4, subtask=1, checkpoint_id=4, stage=1,
        state=AckState(operators={"count": OperatorState(
            handle=HANDLE, key_groups=(64, 128),
            shared=(SharedStateFile(name="000012.sst", handle=HANDLE),))}),
        stats=AckStats(bytes=77)),
    Decline(epoch=4, subtask=0, checkpoint_id=3, reason="upload failed", subsumed=True),
    UserError(epoch=4, subtask=0, operator="map-1", details="ZeroDivisionError"),
    SinkFailure(epoch=4, subtask=1, kind=SinkFailureKind.REJECTED, sink="kafka",
                checkpoint_id=7, problem="record 2 of the interval's 4: too large"),
    SinkFailure(epoch=4, subtask=0, kind=SinkFailureKind.STALLED, sink="write_ahead",
                checkpoint_id=9, problem="its send has failed for 601s"),
]
TO_SUBTASK: list[Message] = [
    Registered(attempt=1, restore=None),
    Registered(attempt=3, restore=CheckpointMetadata(
        job="clicks-u1", checkpoint_id=7, timestamp=1700000000.5, final=False, attempt=2,
        parallelism=2, max_parallelism=128, sources={0: 5, 1: {"file": "a.txt", "offset": 9}},
        operators={"reduce": (KeyedStateHandle(subtask=0, handle=HANDLE, key_groups=(0, 64)),),
                   "count": (KeyedStateHandle(
                       subtask=1, handle=HANDLE, key_groups=(64, 128),
                       shared=(SharedStateFile(name="000012.sst", handle=HANDLE),)),)},
        channels={1: (ChannelStateHandle(subtask=1, handle=HANDLE),)},
        sinks=(SinkTransactions(subtask=1, pending=[[7, "stage", "final", 5]]),))),
    Peers(channels=(ChannelAddress(host="10.0.0.7", port=40123),
                    ChannelAddress(host="exec-2.svc", port=40124))),
    Rejected(reason="epoch 3 is over"),
    Trigger(checkpoint_id=8, timestamp=1700000000.25, final=True),
    Complete(checkpoint_id=8, final=False),
    Abort(checkpoint_id=8, reason="expired after 600s"),
]


class TestEveryMessageKind:
    @pytest.mark.parametrize("message", TO_COORDINATOR, ids=lambda m: m.TYPE)
    def test_a_subtask_message_round_trips(self, message: Message) -> None:
        assert decode_to_coordinator(encode(message)) == message

    @pytest.mark.parametrize("message", TO_SUBTASK, ids=lambda m: m.TYPE)
    def test_a_coordinator_message_round_trips(self, message: Message) -> None:
        assert decode_to_subtask(encode(message)) == message

    def test_the_wire_form_is_json_with_a_version_and_a_type_tag(self) -> None:
        wire = json.loads(encode(Complete(checkpoint_id=2, final=True)))
        assert wire == {"v": FORMAT_VERSION, "type": "complete", "checkpoint_id": 2,
                        "final": True}


def wire(**fields: object) -> bytes:
    return json.dumps(fields).encode()


class TestRejectedMessages:
    def test_an_unknown_type_is_rejected_naming_it(self) -> None:
        with pytest.raises(MessageError, match="unknown control message type 'shutdown'"):
            decode_to_coordinator(wire(v=FORMAT_VERSION, type="shutdown", epoch=1, subtask=0))

    def test_a_message_for_the_other_end_is_an_unknown_type_here(self) -> None:
        with pytest.raises(MessageError, match="unknown control message type 'trigger'"):
            decode_to_coordinator(encode(Trigger(checkpoint_id=1, timestamp=0.0)))
        with pytest.raises(MessageError, match="unknown control message type 'ready'"):
            decode_to_subtask(encode(Ready(epoch=1, subtask=0)))

    def test_another_format_version_is_rejected_naming_both_versions(self) -> None:
        with pytest.raises(MessageError, match=r"version 1 is not supported.*speaks version 5"):
            decode_to_subtask(wire(v=1, type="abort", checkpoint_id=1, reason="x"))
        with pytest.raises(MessageError, match="version None"):
            decode_to_subtask(wire(type="abort", checkpoint_id=1, reason="x"))

    def test_a_field_of_the_wrong_type_is_rejected_naming_the_field(self) -> None:
        with pytest.raises(MessageError, match="'checkpoint_id' of a abort message must be an "
                                               "integer, got str"):
            decode_to_subtask(wire(v=FORMAT_VERSION, type="abort", checkpoint_id="1", reason="x"))
        with pytest.raises(MessageError, match=r"'final'.*true or false"):
            decode_to_subtask(wire(v=FORMAT_VERSION, type="complete", checkpoint_id=1, final=1))

    def test_a_missing_field_is_rejected_naming_the_field(self) -> None:
        with pytest.raises(MessageError, match="lacks the field 'reason'"):
            decode_to_subtask(wire(v=FORMAT_VERSION, type="rejected"))
        with pytest.raises(MessageError, match="lacks the field 'attempt'"):
            decode_to_subtask(wire(v=FORMAT_VERSION, type="registered", restore=None))

    def test_a_bad_nested_state_handle_is_rejected(self) -> None:
        ack = json.loads(encode(TO_COORDINATOR[5]))
        ack["state"]["operators"]["reduce"]["keyGroups"] = [0]
        with pytest.raises(MessageError, match="keyGroups"):
            decode_to_coordinator(json.dumps(ack).encode())

    @pytest.mark.parametrize("channel", [{"host": "h", "port": 0}, {"host": "", "port": 1},
                                         {"host": "h", "port": 70000}, {"host": "h"}])
    def test_a_registration_with_a_bad_channel_address_is_rejected(
            self, channel: dict[str, object]) -> None:
        register = json.loads(encode(TO_COORDINATOR[0]))
        register["channel"] = channel
        with pytest.raises(MessageError, match=r"channel|port"):
            decode_to_coordinator(json.dumps(register).encode())

    @pytest.mark.parametrize("data", [b"\x80\x04K\x01.", b"[1, 2]", b"\xff\xfe", b"{"])
    def test_bytes_that_are_no_json_object_are_rejected(self, data: bytes) -> None:
        with pytest.raises(MessageError):
            decode_to_coordinator(data)

    def test_a_value_json_cannot_carry_is_an_error_when_sending(self) -> None:
        with pytest.raises(MessageError, match="JSON cannot carry"):
            encode(Ack(epoch=1, subtask=0, checkpoint_id=1, stage=0,
                       state=AckState(sources={"0": object()}), stats=AckStats()))


class TestSinkFailures:
    def test_a_sink_failure_of_an_unknown_kind_is_rejected_naming_the_kinds(self) -> None:
        with pytest.raises(MessageError, match="'kind' of a sink_failure message must be one "
                                               "of rejected, stalled, got 'lost'"):
            decode_to_coordinator(wire(v=FORMAT_VERSION, type="sink_failure", epoch=1,
                                       subtask=0, kind="lost", sink="kafka", checkpoint_id=1,
                                       problem="x"))

    def test_progress_of_an_older_subtask_without_sink_figures_reads_as_nothing_held(
            self) -> None:
        body = json.loads(encode(Progress(epoch=1, subtask=0, metrics=TaskMetrics())))
        del body["metrics"]["sinks"]
        decoded = decode_to_coordinator(json.dumps(body).encode())
        assert isinstance(decoded, Progress) and decoded.metrics.sinks == SinkHealth()
