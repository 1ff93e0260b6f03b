"""``python -m cjob_operator``: run the operator.

    python -m cjob_operator [--namespace NS]... [--all-namespaces] [--metrics-port 8080]
        [--health-port 8081] [--peering NAME [--priority N] | --standalone] [--verbose]
        [--runtime-image IMAGE]
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import kopf

from cjob_operator.options import OperatorOptions, parse_options


def run(options: OperatorOptions) -> None:
    """Run kopf with this package's handlers until a signal stops it."""
    import cjob_operator.handlers  # noqa: F401  (registers the handlers)

    kopf.configure(verbose=options.verbose)
    kopf.run(
        clusterwide=options.all_namespaces,
        namespaces=list(options.namespaces),
        standalone=True if options.standalone else None,
        peering_name=options.peering,
        priority=options.priority if options.peering else None,
        liveness_endpoint=options.liveness_endpoint,
        memo=kopf.Memo(options=options),
    )


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    run(options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
