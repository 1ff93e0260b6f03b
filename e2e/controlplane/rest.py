"""A small Kubernetes REST client on the standard library.

The process node and the readiness checks use it instead of the ``kubernetes``
package so that they keep working no matter which client version a test installs,
and so that watches can be read line by line with a bounded read timeout (a stalled
watch is noticed and re-opened instead of hanging a test).
"""

from __future__ import annotations

import copy
import http.client
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(RuntimeError):
    """An error answer from the apiserver, with its HTTP status and Status reason."""

    def __init__(self, *, status: int, reason: str, message: str, method: str, path: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.method = method
        self.path = path
        super().__init__(f"{method} {path}: {status} {reason}: {message}")


class RestClient:
    """Authenticated JSON requests against one apiserver.

    :meth:`impersonating` gives a client whose requests act as another user (the
    ``Impersonate-User`` and ``Impersonate-Group`` headers); the authenticated user
    needs the ``impersonate`` right, as the control plane's admin has.
    """

    def __init__(
        self,
        *,
        server: str,
        ca_file: Path,
        client_cert: Path | None = None,
        client_key: Path | None = None,
        token: str | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.impersonated_user: str | None = None
        self.impersonated_groups: tuple[str, ...] = ()
        self._context = ssl.create_default_context(cafile=str(ca_file))
        if client_cert is not None and client_key is not None:
            self._context.load_cert_chain(str(client_cert), str(client_key))

    def _open(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = JSON,
        query: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Any:
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", JSON)
        if data is not None:
            request.add_header("Content-Type", content_type)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            if self.impersonated_user is None:
                return urllib.request.urlopen(request, context=self._context, timeout=timeout)
            request.add_header("Impersonate-User", self.impersonated_user)
            if self.impersonated_groups:
                groups = GROUP_SEPARATOR.join(self.impersonated_groups)
                request.add_header(IMPERSONATE_GROUP, groups)
            opener = urllib.request.build_opener(_ImpersonatingHandler(context=self._context))
            return opener.open(request, timeout=timeout)
        except urllib.error.HTTPError as err:
            raise _api_error(err, method=method, path=path) from None

    def impersonating(self, user: str, groups: Iterable[str] = ()) -> RestClient:
        """A client sending the same credentials, acting as ``user`` in ``groups``."""
        client = copy.copy(self)
        client.impersonated_user = user
        client.impersonated_groups = tuple(groups)
        return client

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = JSON,
        query: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Any:
        """Send one request and return the decoded JSON answer."""
        with self._open(
            method, path, body=body, content_type=content_type, query=query, timeout=timeout
        ) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def get_text(self, path: str, *, timeout: float = 10.0) -> str:
        """GET a plain-text endpoint such as ``/readyz``."""
        with self._open("GET", path, timeout=timeout) as resp:
            body: bytes = resp.read()
        return body.decode()

    def get(self, path: str, *, query: dict[str, str] | None = None) -> Any:
        return self.request("GET", path, query=query)

    def watch(
        self, path: str, *, query: dict[str, str], timeout_seconds: int = 60
    ) -> Iterator[dict[str, Any]]:
        """Yield watch events until the server closes the stream.

        The socket read timeout is a little longer than the server-side timeout, so
        a silent connection ends the iteration with an error instead of blocking.
        """
        params = dict(query)
        params["watch"] = "true"
        params["timeoutSeconds"] = str(timeout_seconds)
        params.setdefault("allowWatchBookmarks", "true")
        with self._open("GET", path, query=params, timeout=timeout_seconds + 15) as resp:
            for line in resp:
                line = line.strip()
                if line:
                    event: dict[str, Any] = json.loads(line)
                    yield event


IMPERSONATE_GROUP = "Impersonate-Group"
GROUP_SEPARATOR = "\n"
"""Joins the impersonated groups in urllib's one value per header; split again on the
way out (a line break is never valid inside a header value, nor in a group name)."""


class _GroupHeadersConnection(http.client.HTTPSConnection):
    """Sends ``Impersonate-Group`` as one header line per group, as the apiserver reads
    it (urllib keeps a single value per header name)."""

    def putheader(self, header: str | bytes, *values: Any) -> None:
        name = header.decode() if isinstance(header, bytes) else header
        if name.lower() == IMPERSONATE_GROUP.lower() and len(values) == 1:
            for group in str(values[0]).split(GROUP_SEPARATOR):
                super().putheader(header, group)
            return
        super().putheader(header, *values)


class _ImpersonatingHandler(urllib.request.HTTPSHandler):
    def __init__(self, *, context: ssl.SSLContext) -> None:
        super().__init__(context=context)
        self._ssl_context = context

    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_GroupHeadersConnection, req, context=self._ssl_context)


def _api_error(err: urllib.error.HTTPError, *, method: str, path: str) -> ApiError:
    reason, message = err.reason, ""
    try:
        status = json.loads(err.read() or b"{}")
        reason = status.get("reason") or reason
        message = status.get("message", "")
    except (ValueError, OSError):
        pass
    return ApiError(status=err.code, reason=str(reason), message=message, method=method, path=path)


def quote(value: str) -> str:
    """Quote one path segment."""
    return urllib.parse.quote(value, safe="")
