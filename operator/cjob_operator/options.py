"""Command-line options of ``python -m cjob_operator`` (the Helm chart relies on them)."""

from __future__ import annotations

import argparse
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_METRICS_PORT = 8080
DEFAULT_HEALTH_PORT = 8081
RUNTIME_IMAGE_ENV = "CJOB_RUNTIME_IMAGE"
"""Environment variable read when ``--runtime-image`` is not given."""


@dataclass(frozen=True)
class OperatorOptions:
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False
    metrics_port: int | None = DEFAULT_METRICS_PORT
    """0 disables the metrics server."""
    health_port: int | None = DEFAULT_HEALTH_PORT
    """0 disables the liveness endpoint."""
    peering: str | None = None
    priority: int = 0
    """Peering priority: the live replica with the highest one is active. Replicas with
    equal priorities would all pause, so without ``--priority`` a random one is drawn."""
    standalone: bool = False
    verbose: bool = False
    kubeconfig: str | None = None
    runtime_image: str | None = None
    """The image of jobs without ``spec.image`` (the chart's ``runtimeImage``)."""
    network_policies: bool = True
    """Give each job a NetworkPolicy (off with ``--no-network-policies``)."""

    @property
    def liveness_endpoint(self) -> str | None:
        if not self.health_port:
            return None
        return f"http://0.0.0.0:{self.health_port}/healthz"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cjob_operator",
        description="The CheckpointedJob operator: runs PySpark jobs that restart from "
        "their latest checkpoint.",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        default=[],
        metavar="NS",
        help="watch this namespace (repeatable; glob patterns like 'team-*' work)",
    )
    scope.add_argument(
        "--all-namespaces", action="store_true", help="watch CheckpointedJobs in every namespace"
    )
    parser.add_argument(
        "--metrics-port",
        type=_port,
        default=DEFAULT_METRICS_PORT,
        help=f"Prometheus metrics port, 0 to disable (default {DEFAULT_METRICS_PORT})",
    )
    parser.add_argument(
        "--health-port",
        type=_port,
        default=DEFAULT_HEALTH_PORT,
        help=f"liveness endpoint /healthz port, 0 to disable (default {DEFAULT_HEALTH_PORT})",
    )
    peering = parser.add_mutually_exclusive_group()
    peering.add_argument(
        "--peering",
        metavar="NAME",
        help="coordinate with other replicas through the KopfPeering object NAME "
        "(one replica is active at a time)",
    )
    peering.add_argument(
        "--standalone", action="store_true", help="run without peering (a single replica)"
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority (default: random, so that exactly one replica is active)",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster or $KUBECONFIG)")
    parser.add_argument(
        "--runtime-image",
        type=_image,
        metavar="IMAGE",
        help="image (Spark, Python and job_runtime) of jobs that set no spec.image "
        f"(default: ${RUNTIME_IMAGE_ENV}; without either such jobs fail with reason NoImage)",
    )
    parser.add_argument(
        "--no-network-policies",
        dest="network_policies",
        action="store_false",
        help="do not give each job a NetworkPolicy admitting only its own pods "
        "(for clusters whose policies are managed elsewhere)",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    return parser


def parse_options(
    argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> OperatorOptions:
    """Parse the command line; exits with usage on bad flags like any CLI.

    ``environ`` (default ``os.environ``) supplies settings that may come from the
    environment instead of a flag.
    """
    parser = build_parser()
    ns = parser.parse_args(argv)
    env = os.environ if environ is None else environ
    runtime_image = ns.runtime_image
    if runtime_image is None and env.get(RUNTIME_IMAGE_ENV, "").strip():
        try:
            runtime_image = _image(env[RUNTIME_IMAGE_ENV])
        except argparse.ArgumentTypeError as exc:
            parser.error(f"{RUNTIME_IMAGE_ENV}: {exc}")
    if not ns.namespaces and not ns.all_namespaces:
        parser.error("say which namespaces to watch: --namespace NS (repeatable) "
                     "or --all-namespaces")
    priority = ns.priority
    if priority is None:
        priority = secrets.randbelow(1_000_000) + 1 if ns.peering else 0
    return OperatorOptions(
        namespaces=tuple(ns.namespaces),
        all_namespaces=bool(ns.all_namespaces),
        metrics_port=ns.metrics_port or None,
        health_port=ns.health_port or None,
        peering=ns.peering,
        priority=priority,
        standalone=bool(ns.standalone),
        verbose=bool(ns.verbose),
        kubeconfig=ns.kubeconfig,
        runtime_image=runtime_image,
        network_policies=bool(ns.network_policies),
    )


def _image(text: str) -> str:
    image = text.strip()
    if not image or any(character.isspace() for character in image):
        raise argparse.ArgumentTypeError(f"not an image reference: {text!r}")
    return image


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range 0-65535: {value}")
    return value
