"""Where the Kafka clients of the source (consumers, the admin client, the dead-letter
producer) write their own log lines: the logger ``job_runtime.sources.kafka.client``,
a name users filter on, so it stays that whatever module builds a client."""

from __future__ import annotations

import logging
from typing import Any


class ClientLog:
    """The clients' own log lines, as warnings at most: what a client retries by itself
    (a broker restarting) is no error of the job."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        self._logger.log(min(level, logging.WARNING), msg, *args)


CLIENT_LOG = ClientLog(logging.getLogger("job_runtime.sources.kafka.client"))
"""The ``logger`` setting of every client the source builds."""
