"""One subtask of the job, running inside one task of a Spark barrier stage.

The subtask loads the job's code, registers with the coordinator (which answers
with the attempt and the checkpoint to restore; a standby's answers only once it is
promoted), learns its peers' channel addresses from the coordinator once every subtask
registered, opens its own TCP channels for the keyed exchanges and runs one thread per
stage until the final checkpoint completes. When Spark relaunches the stage after a crash,
all of this happens again and the subtasks restore the latest checkpoint.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any, TypeVar

from cjob_checkpoint.checkpoint_storage import CheckpointStorage, StateHandle
from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.s3 import S3Config
from cjob_spec.model import CheckpointMode
from job_runtime.coordinator.messages import (
    Abort,
    ChannelAddress,
    Complete,
    Decline,
    Done,
    Peers,
    Progress,
    Ready,
    Register,
    Registered,
    Rejected,
    SinkFailure,
    SourcesFinished,
    TaskMetrics,
    ToCoordinator,
    Trigger,
    UserError,
)
from job_runtime.coordinator.rpc import ConnectionLost, SubtaskConnection, connect
from job_runtime.errors import RuntimeJobError, UserCodeError
from job_runtime.execution.config import LOOPBACK, SubtaskConfig
from job_runtime.execution.entrypoint import add_python_path, build_pipeline
from job_runtime.execution.process_clock import process_started_at
from job_runtime.execution.stages import plan_stages
from job_runtime.execution.subtask.keyed_task import KeyedTask
from job_runtime.execution.subtask.source_task import SourceTask
from job_runtime.execution.subtask.task import BranchOutput, Task
from job_runtime.execution.subtask.uploader import Uploader, UploadJob
from job_runtime.network.channels import (
    ChannelListener,
    InputGate,
    LocalOutputChannel,
    OutputChannel,
    TcpOutputChannel,
    serve_input_channel,
)
from job_runtime.network.framing import ChannelHello
from job_runtime.network.handshake import Session
from job_runtime.operators.chain import RecordChain
from job_runtime.sinks.failures import SinkFailedError
from job_runtime.sinks.health import SinkHealth
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter

log = logging.getLogger(__name__)

A = TypeVar("A", Registered, Peers)


class SubtaskFailed(RuntimeJobError):
    """A task of this subtask failed; Spark will relaunch the stage."""


class SubtaskRuntime:
    def __init__(self, *, config: SubtaskConfig, subtask: int, epoch: int,
                 listener: socket.socket, channel: ChannelAddress) -> None:
        self.config = config
        self.subtask = subtask
        self.epoch = epoch
        self.listener = listener
        self.channel = channel
        """Where :attr:`listener` answers, as the peers are told."""
        self.peers: tuple[ChannelAddress, ...] = ()
        self.cancelled = threading.Event()
        self.s3_config = S3Config(**config.s3) if config.s3 else None
        self.storage = CheckpointStorage(
            config.checkpoint_root, config.job_id,
            fs=get_filesystem(config.checkpoint_root, s3=self.s3_config))
        self.conn: SubtaskConnection = connect(config.coordinator_host,
                                               config.coordinator_port, key=config.key)
        self.uploader = Uploader(storage=self.storage, subtask=subtask, epoch=epoch,
                                 send=self.send, cancelled=self.cancelled.is_set)
        self.tasks: list[Task] = []
        self.writers: dict[str, SinkWriter] = {}
        self.gates: dict[int, InputGate] = {}
        self.failure: BaseException | None = None
        self._sources_finished = False
        self.channels: ChannelListener | None = None

    # ------------------------------------------------------------------ rpc

    def send(self, message: ToCoordinator) -> None:
        self.conn.send(message)

    # ------------------------------------------------------------------ task context

    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()

    def submit_snapshot(self, job: UploadJob) -> None:
        self.uploader.submit(job)

    def read_state(self, handle: StateHandle) -> bytes:
        return self.storage.read_state(handle)

    def decline(self, checkpoint_id: int, reason: str, *, subsumed: bool = False) -> None:
        try:
            self.send(Decline(epoch=self.epoch, subtask=self.subtask,
                              checkpoint_id=checkpoint_id, reason=reason, subsumed=subsumed))
        except ConnectionLost:
            pass

    def source_finished(self) -> None:
        if not self._sources_finished:
            self._sources_finished = True
            self.send(SourcesFinished(epoch=self.epoch, subtask=self.subtask))

    def register(self) -> Registered:
        """Register and wait for the answers: the attempt and the checkpoint to
        restore, then every subtask's channel address (:attr:`peers`).

        A standby's subtasks wait here, with the job's code loaded, until the standby
        is promoted; an active driver answers at once, and sends the peers when the
        last subtask of the epoch registered. The coordinator is the rendezvous, not
        Spark's ``allGather``: a barrier task waiting there checks for the answer once
        a second, which cost every start and every relaunch up to a second.
        """
        self.send(Register(epoch=self.epoch, subtask=self.subtask, host=socket.gethostname(),
                           pid=os.getpid(), channel=self.channel))
        registered = self._answer(Registered)
        peers = self._answer(Peers)
        if len(peers.channels) != self.config.parallelism:
            raise SubtaskFailed(f"the coordinator named {len(peers.channels)} peers for "
                                f"parallelism {self.config.parallelism}")
        self.peers = peers.channels
        return registered

    def _answer(self, kind: type[A]) -> A:
        answer = self.conn.receive()
        if isinstance(answer, kind):
            return answer
        if isinstance(answer, Rejected):
            raise SubtaskFailed(f"coordinator refused registration: {answer.reason}")
        raise SubtaskFailed(f"coordinator answered a registration with {answer.TYPE}, "
                            f"not {kind.TYPE}")

    def _listen_coordinator(self) -> None:
        try:
            while not self.cancelled.is_set():
                message = self.conn.receive()
                match message:
                    case Trigger():
                        targets: list[Task] = [t for t in self.tasks
                                               if isinstance(t, SourceTask)]
                    case Complete() | Abort():
                        targets = self.tasks
                    case _:
                        log.warning("subtask %d ignores an unexpected %s message", self.subtask,
                                    message.TYPE)
                        continue
                for task in targets:
                    task.control.put(message)
                for gate in self.gates.values():
                    gate.wake()
        except ConnectionLost as exc:
            if not self.cancelled.is_set() and not all(t.finished for t in self.tasks):
                self.task_failed(SubtaskFailed(f"lost the coordinator: {exc}"))

    def task_failed(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        try:
            if isinstance(exc, UserCodeError):
                self.send(UserError(epoch=self.epoch, subtask=self.subtask,
                                    operator=exc.operator, details=exc.details))
            elif isinstance(exc, SinkFailedError):
                self.send(SinkFailure(epoch=self.epoch, subtask=self.subtask, kind=exc.kind,
                                      sink=exc.sink, checkpoint_id=exc.checkpoint_id,
                                      problem=exc.problem))
        except ConnectionLost:
            pass
        self.cancelled.set()
        for gate in self.gates.values():
            gate.fail(SubtaskFailed("another task of this subtask failed"))

    def metrics(self) -> TaskMetrics:
        firsts = [t.first_record_at for t in self.tasks if t.first_record_at is not None]
        lasts = [t.last_record_at for t in self.tasks if t.last_record_at is not None]
        restores = [t.restore_seconds for t in self.tasks if t.restore_seconds is not None]
        marks = [t.event_watermark for t in self.tasks
                 if isinstance(t, KeyedTask) and t.event_watermark is not None]
        return TaskMetrics(
            records_in=sum(t.records_in for t in self.tasks if isinstance(t, SourceTask)),
            records_out=sum(t.records_out for t in self.tasks),
            blocked_seconds=sum(o.blocked_seconds for t in self.tasks for o in t.outputs),
            first_record_at=min(firsts) if firsts else None,
            last_record_at=max(lasts) if lasts else None,
            restore_seconds=sum(restores) if restores else None,
            rejected_connections=self.channels.rejected if self.channels is not None else 0,
            source_backlog=tuple(lag for t in self.tasks if isinstance(t, SourceTask)
                                 for lag in t.backlog()),
            watermark=min(marks) if marks else None,
            late_records=sum(t.operator.late_records for t in self.tasks
                             if isinstance(t, KeyedTask)),
            sinks=sum((writer.health() for writer in self.writers.values()), SinkHealth()))

    def _report_progress(self) -> None:
        while not self.cancelled.wait(self.config.progress_interval):
            try:
                self.send(Progress(epoch=self.epoch, subtask=self.subtask,
                                   metrics=self.metrics()))
            except ConnectionLost:
                return
            if all(t.finished for t in self.tasks):
                return
            # Here, not in the sink's own thread: a send that hangs never fails by itself.
            overdue = next((stall for writer in self.writers.values()
                            if (stall := writer.overdue()) is not None), None)
            if overdue is not None:
                self.task_failed(overdue)
                return

    # ------------------------------------------------------------------ channels

    def _on_channel(self, sock: socket.socket, session: Session, hello: ChannelHello) -> None:
        gate = self.gates.get(hello.stage)
        if gate is None or not 0 <= hello.sender < self.config.parallelism:
            log.warning("subtask %d closes a channel for stage %d from subtask %d: no such "
                        "input", self.subtask, hello.stage, hello.sender)
            sock.close()
            return
        threading.Thread(target=serve_input_channel, daemon=True,
                         kwargs={"sock": sock, "session": session, "gate": gate,
                                 "channel": hello.sender, "credits": self.config.credits},
                         name=f"channel-{hello.stage}-{hello.sender}").start()

    def _outputs(self, stage: int) -> list[OutputChannel]:
        outputs: list[OutputChannel] = []
        for target, peer in enumerate(self.peers):
            address = (peer.host, peer.port)
            if target == self.subtask:
                outputs.append(LocalOutputChannel(gate=self.gates[stage], channel=self.subtask,
                                                  credits=self.config.credits))
            else:
                outputs.append(TcpOutputChannel(
                    address=address, hello=ChannelHello(stage=stage, sender=self.subtask),
                    key=self.config.key))
        return outputs

    # ------------------------------------------------------------------ run

    def run(self) -> dict[str, Any]:
        config = self.config
        # The job's code first: a parked subtask (see ``register``) has it loaded.
        add_python_path(config.python_path)
        pipeline = build_pipeline(entrypoint=config.entrypoint, args=config.args,
                                  name=config.job_name)
        stages = plan_stages(pipeline)
        # And the storage's client: the restore is the first thing after the answer.
        self.storage.fs.prepare()
        registered = self.register()
        restore = registered.restore
        unaligned = config.unaligned and config.mode is CheckpointMode.EXACTLY_ONCE
        for plan in stages[1:]:
            self.gates[plan.index] = InputGate(channels=config.parallelism,
                                               priority_barriers=unaligned)
        self.channels = ChannelListener(sock=self.listener, key=config.key,
                                        on_channel=self._on_channel)
        context = SinkContext(
            subtask=self.subtask, parallelism=config.parallelism,
            attempt_tag=f"a{registered.attempt}e{self.epoch}", s3=self.s3_config,
            job_id=config.job_id, staging_root=self.storage.job_dir,
            restored_parallelism=0 if restore is None else restore.parallelism,
            restored_job="" if restore is None else restore.job,
            stall_timeout=config.sink_stall_timeout)
        writers: dict[str, SinkWriter] = self.writers
        for name, sink_op in pipeline.sinks():
            writer = writers[name] = sink_op.open(context=context.of_sink(name))
            if restore is not None:
                try:
                    writer.restore(restore.sink_transactions(
                        subtask=self.subtask, parallelism=config.parallelism, sink=name))
                except SinkFailedError as exc:  # the coordinator learns why the attempt ends
                    self.task_failed(exc)
                    raise
        for plan in stages:
            outputs = self._outputs(plan.index + 1) if plan.index + 1 < len(stages) else []
            sink = writers[pipeline.sink_name] if plan.has_sink else None
            branches = tuple(
                BranchOutput(tag=b.tag, chain=RecordChain(ops=b.ops, subtask=self.subtask),
                             sink_name=b.sink_name, writer=writers[b.sink_name])
                for b in plan.branches)
            task: Task
            if plan.index == 0:
                task = SourceTask(runtime=self, plan=plan, outputs=outputs, sink=sink,
                                  sink_name=pipeline.sink_name, source=pipeline.job_source(),
                                  restore=restore)
            else:
                task = KeyedTask(runtime=self, plan=plan, outputs=outputs, sink=sink,
                                 sink_name=pipeline.sink_name, branches=branches,
                                 gate=self.gates[plan.index], restore=restore)
            self.tasks.append(task)
        threading.Thread(target=self._listen_coordinator, daemon=True,
                         name="coordinator-client").start()
        threading.Thread(target=self._report_progress, daemon=True, name="progress").start()
        for task in self.tasks:
            task.start()
        self.send(Ready(epoch=self.epoch, subtask=self.subtask))
        for task in self.tasks:
            while task.is_alive():
                task.join(timeout=0.2)
        if self.failure is not None:
            raise self.failure
        self.uploader.close()
        for task in self.tasks:
            for out in task.outputs:
                out.close()
        for writer in writers.values():
            writer.close()
        metrics = self.metrics()
        records = metrics.records_out
        self.send(Done(epoch=self.epoch, subtask=self.subtask, metrics=metrics))
        time.sleep(0.05)
        self.cancelled.set()
        self.conn.close()
        assert self.channels is not None
        self.channels.stop()
        return {"subtask": self.subtask, "records_out": records, "epoch": self.epoch}


def _advertised_host(context: Any) -> str:
    host = (os.environ.get("CJOB_ADVERTISED_HOST") or os.environ.get("SPARK_EXECUTOR_POD_IP")
            or os.environ.get("SPARK_LOCAL_IP"))
    if host:
        return host
    try:
        address: str = context.getTaskInfos()[context.partitionId()].address
        return address.rsplit(":", 1)[0]
    except Exception:
        return LOOPBACK


def channel_addresses(*, loopback: bool, context: Any) -> tuple[str, str]:
    """(bind address, advertised address) of a subtask's channel listener.

    Local mode binds loopback: every peer is on this machine. Elsewhere the
    listener binds the address it advertises (the executor pod's IP), never every
    interface; only a name that does not resolve falls back to all interfaces,
    where the handshake still keeps strangers out.
    """
    if loopback:
        return LOOPBACK, LOOPBACK
    host = _advertised_host(context)
    try:
        ipaddress.ip_address(host)
        return host, host
    except ValueError:
        pass
    try:
        return socket.gethostbyname(host), host
    except OSError:
        log.warning("cannot resolve %s; the channel listener binds every interface", host)
        return "0.0.0.0", host


def run_subtask(config: SubtaskConfig, _: Iterator[Any]) -> Iterator[tuple[int, Any]]:
    """The function of the barrier stage's ``mapPartitions``."""
    from pyspark import BarrierTaskContext

    entered = time.time()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s subtask %(levelname)s %(message)s")
    context = BarrierTaskContext.get()
    subtask = context.partitionId()
    bind, host = channel_addresses(loopback=config.loopback, context=context)
    listener = socket.create_server((bind, 0))
    epoch = config.epoch
    runtime = SubtaskRuntime(config=config, subtask=subtask, epoch=epoch, listener=listener,
                             channel=ChannelAddress(host=host,
                                                    port=listener.getsockname()[1]))
    # Where a (re)launch spends its time before the subtask registers: the worker's
    # fork, its imports and the job's closure.
    log.info("subtask %d (epoch %d) launched: worker process %.2fs before the task "
             "function", subtask, epoch, entered - process_started_at())
    try:
        summary = runtime.run()
    except UserCodeError:
        runtime.cancelled.set()
        raise
    except BaseException:
        log.error("subtask %d failed:\n%s", subtask, traceback.format_exc())
        runtime.cancelled.set()
        raise
    yield subtask, summary
