"""One subtask of the job, running inside one task of a Spark barrier stage.

The subtask exchanges addresses with its peers once (``allGather``), registers
with the coordinator (which answers with the checkpoint to restore), opens its
own TCP channels for the keyed exchanges and runs one thread per stage until
the final checkpoint completes. When Spark relaunches the stage after a crash,
all of this happens again and the subtasks restore the latest checkpoint.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

from job_runtime.coordinator.rpc import ConnectionLost, RpcConnection, connect
from job_runtime.errors import RuntimeJobError, UserCodeError
from job_runtime.execution.config import SubtaskConfig
from job_runtime.execution.entrypoint import add_python_path, build_pipeline
from job_runtime.execution.stages import plan_stages
from job_runtime.execution.tasks import KeyedTask, SourceTask, Task
from job_runtime.execution.uploader import Uploader
from job_runtime.network.channels import (
    InputGate,
    LocalOutputChannel,
    OutputChannel,
    TcpOutputChannel,
    serve_input_channel,
)
from job_runtime.network.framing import Kind, recv_frame
from job_runtime.sinks.base import SinkContext
from job_runtime.storage.checkpoint_storage import CheckpointStorage
from job_runtime.storage.filesystem import S3Config, get_filesystem

log = logging.getLogger(__name__)


class SubtaskFailed(RuntimeJobError):
    """A task of this subtask failed; Spark will relaunch the stage."""


class SubtaskRuntime:
    def __init__(self, *, config: SubtaskConfig, subtask: int, epoch: int,
                 peers: list[tuple[str, int]], listener: socket.socket) -> None:
        self.config = config
        self.subtask = subtask
        self.epoch = epoch
        self.peers = peers
        self.listener = listener
        self.cancelled = threading.Event()
        self.s3_config = S3Config(**config.s3) if config.s3 else None
        self.storage = CheckpointStorage(
            config.checkpoint_root, config.job_id,
            fs=get_filesystem(config.checkpoint_root, s3=self.s3_config))
        self.conn: RpcConnection = connect(config.coordinator_host, config.coordinator_port)
        self.uploader = Uploader(storage=self.storage, send=self.send,
                                 cancelled=self.cancelled.is_set)
        self.tasks: list[Task] = []
        self.gates: dict[int, InputGate] = {}
        self.failure: BaseException | None = None
        self._sources_finished = False
        self._accepting = True

    # ------------------------------------------------------------------ rpc

    def send(self, kind: str, **fields: Any) -> None:
        self.conn.send(kind, epoch=self.epoch, subtask=self.subtask, **fields)

    def decline(self, checkpoint_id: int, reason: str, *, subsumed: bool = False) -> None:
        try:
            self.send("decline", checkpoint_id=checkpoint_id, reason=reason, subsumed=subsumed)
        except ConnectionLost:
            pass

    def source_finished(self) -> None:
        if not self._sources_finished:
            self._sources_finished = True
            self.send("sources_finished")

    def register(self) -> dict[str, Any] | None:
        self.send("register", host=socket.gethostname(), pid=os.getpid())
        kind, fields = self.conn.receive()
        if kind != "registered":
            raise SubtaskFailed(f"coordinator refused registration: {fields.get('reason')}")
        restore: dict[str, Any] | None = fields.get("restore")
        return restore

    def _listen_coordinator(self) -> None:
        try:
            while not self.cancelled.is_set():
                kind, fields = self.conn.receive()
                targets = self.tasks
                if kind == "trigger":
                    targets = [t for t in self.tasks if isinstance(t, SourceTask)]
                for task in targets:
                    task.control.put((kind, fields))
                for gate in self.gates.values():
                    gate.wake()
        except ConnectionLost as exc:
            if not self.cancelled.is_set() and not all(t.finished for t in self.tasks):
                self.task_failed(None, SubtaskFailed(f"lost the coordinator: {exc}"))

    def task_failed(self, task: Task | None, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        if isinstance(exc, UserCodeError):
            try:
                self.send("user_error", operator=exc.operator, details=exc.details)
            except ConnectionLost:
                pass
        self.cancelled.set()
        for gate in self.gates.values():
            gate.fail(SubtaskFailed("another task of this subtask failed"))

    def _record_times(self) -> dict[str, float]:
        firsts = [t.first_record_at for t in self.tasks if t.first_record_at is not None]
        lasts = [t.last_record_at for t in self.tasks if t.last_record_at is not None]
        times: dict[str, float] = {}
        if firsts:
            times["first_record_at"] = min(firsts)
        if lasts:
            times["last_record_at"] = max(lasts)
        restores = [t.restore_seconds for t in self.tasks if t.restore_seconds is not None]
        if restores:
            times["restore_seconds"] = sum(restores)
        return times

    def _report_progress(self) -> None:
        while not self.cancelled.wait(self.config.progress_interval):
            metrics = {
                "records_in": sum(t.records_in for t in self.tasks if isinstance(t, SourceTask)),
                "records_out": sum(t.records_out for t in self.tasks),
                "blocked_seconds": sum(o.blocked_seconds for t in self.tasks for o in t.outputs),
                **self._record_times(),
            }
            try:
                self.send("progress", metrics=metrics)
            except ConnectionLost:
                return
            if all(t.finished for t in self.tasks):
                return

    # ------------------------------------------------------------------ channels

    def _accept_channels(self) -> None:
        while self._accepting:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            kind, _, payload = recv_frame(sock)
            if kind != Kind.HELLO:
                sock.close()
                continue
            stage, sender = pickle.loads(payload)
            gate = self.gates[stage]
            threading.Thread(target=serve_input_channel, daemon=True,
                             kwargs={"sock": sock, "gate": gate, "channel": sender,
                                     "credits": self.config.credits},
                             name=f"channel-{stage}-{sender}").start()

    def _outputs(self, stage: int) -> list[OutputChannel]:
        outputs: list[OutputChannel] = []
        for target, address in enumerate(self.peers):
            if target == self.subtask:
                outputs.append(LocalOutputChannel(gate=self.gates[stage], channel=self.subtask,
                                                  credits=self.config.credits))
            else:
                hello = pickle.dumps((stage, self.subtask))
                outputs.append(TcpOutputChannel(address=address, hello=hello))
        return outputs

    # ------------------------------------------------------------------ run

    def run(self) -> dict[str, Any]:
        config = self.config
        restore = self.register()
        add_python_path(config.python_path)
        pipeline = build_pipeline(entrypoint=config.entrypoint, args=config.args,
                                  name=config.job_name)
        stages = plan_stages(pipeline)
        unaligned = config.unaligned and config.mode == "exactly_once"
        for plan in stages[1:]:
            self.gates[plan.index] = InputGate(channels=config.parallelism,
                                               priority_barriers=unaligned)
        threading.Thread(target=self._accept_channels, daemon=True, name="channels").start()
        sink_writer = None
        assert pipeline.sink_op is not None
        sink_writer = pipeline.sink_op.open(context=SinkContext(
            subtask=self.subtask, parallelism=config.parallelism,
            attempt_tag=f"a{config.attempt}e{self.epoch}", s3=self.s3_config,
            job_id=config.job_id))
        if restore:
            old_parallelism = int(restore.get("parallelism", config.parallelism))
            states = [restore.get("sinks", {}).get(str(j)) for j in range(old_parallelism)
                      if j % config.parallelism == self.subtask]
            sink_writer.restore([s for s in states if s])
        for plan in stages:
            outputs = self._outputs(plan.index + 1) if plan.index + 1 < len(stages) else []
            sink = sink_writer if plan.has_sink else None
            task: Task
            if plan.index == 0:
                assert pipeline.source_op is not None
                task = SourceTask(runtime=self, plan=plan, outputs=outputs, sink=sink,
                                  source=pipeline.source_op, restore=restore)
            else:
                task = KeyedTask(runtime=self, plan=plan, outputs=outputs, sink=sink,
                                 gate=self.gates[plan.index], restore=restore)
            self.tasks.append(task)
        threading.Thread(target=self._listen_coordinator, daemon=True,
                         name="coordinator-client").start()
        threading.Thread(target=self._report_progress, daemon=True, name="progress").start()
        for task in self.tasks:
            task.start()
        self.send("ready")
        for task in self.tasks:
            while task.is_alive():
                task.join(timeout=0.2)
        self._accepting = False
        if self.failure is not None:
            raise self.failure
        self.uploader.close()
        for task in self.tasks:
            for out in task.outputs:
                out.close()
        sink_writer.close()
        records = sum(t.records_out for t in self.tasks)
        self.send("done", metrics={
            "records_in": sum(t.records_in for t in self.tasks if isinstance(t, SourceTask)),
            "records_out": records, **self._record_times()})
        time.sleep(0.05)
        self.cancelled.set()
        self.conn.close()
        self.listener.close()
        return {"subtask": self.subtask, "records_out": records, "epoch": self.epoch}


def _advertised_host(context: Any) -> str:
    host = os.environ.get("CJOB_ADVERTISED_HOST") or os.environ.get("SPARK_LOCAL_IP")
    if host:
        return host
    try:
        address: str = context.getTaskInfos()[context.partitionId()].address
        return address.rsplit(":", 1)[0]
    except Exception:
        return "127.0.0.1"


def run_subtask(config: SubtaskConfig, _: Iterator[Any]) -> Iterator[tuple[int, Any]]:
    """The function of the barrier stage's ``mapPartitions``."""
    from pyspark import BarrierTaskContext

    logging.basicConfig(level=logging.INFO, format="%(asctime)s subtask %(levelname)s %(message)s")
    context = BarrierTaskContext.get()
    subtask = context.partitionId()
    listener = socket.create_server(("0.0.0.0", 0))
    port = listener.getsockname()[1]
    host = _advertised_host(context)
    # Task attempt ids grow over the whole application, so the largest one of this
    # stage attempt names it: every subtask computes the same epoch, and a relaunch
    # of the stage gets a larger one.
    gathered = context.allGather(f"{context.taskAttemptId()}|{host}|{port}")
    peers = []
    attempt_ids = []
    for entry in gathered:
        attempt_id, peer_host, peer_port = entry.split("|")
        attempt_ids.append(int(attempt_id))
        peers.append((peer_host, int(peer_port)))
    epoch = max(attempt_ids)
    runtime = SubtaskRuntime(config=config, subtask=subtask, epoch=epoch, peers=peers,
                             listener=listener)
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
