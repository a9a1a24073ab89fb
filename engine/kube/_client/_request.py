"""How one request is sent, its method and path aside: query, body, streaming, retries (:class:`RequestOptions`).

The client's methods build one per request (the plain reads share a constant one), with the
query already escaped and the body already encoded, and hand it unchanged to the retry loop
and from there to the sender (``_sender``), which reads only the parts it needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import attrs

from . import _json
from ._retry import RetryPolicy

__all__ = ["RequestOptions"]


def _query_value(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


@attrs.frozen(kw_only=True)
class RequestOptions:
    """How one request is sent, its method and path aside; build it with :meth:`of`."""

    safe: bool
    """Whether doing the request twice cannot do harm (a read, establishing a watch): it is then
    retried on ``5xx`` answers and transport failures too, not only on ``429``."""
    query: str = ""
    """The query string, escaped, without ``?`` (``""``: none)."""
    content: bytes | None = None
    """The body, encoded (``None``: no body)."""
    content_type: str = "application/json"
    """The body's ``Content-Type`` (unused without a body)."""
    stream: bool = False
    """Return the answer before its body is read (a watch); the caller reads and closes it."""
    load: bool = True
    """With ``False`` a successful answer may come back unloaded (call ``read()`` before
    ``content``): for a write whose answer the caller does not use."""
    retry: RetryPolicy | None = None
    """The retry policy of this request (``None``: the client's)."""

    @classmethod
    def of(
        cls,
        *,
        safe: bool,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        stream: bool = False,
        load: bool = True,
        retry: RetryPolicy | None = None,
    ) -> RequestOptions:
        """The options of a request with query ``params`` (those that are ``None`` are left out,
        booleans are sent as ``true`` and ``false``) and ``body`` (encoded as JSON unless
        ``None``); the other arguments are the fields of the same names."""
        query = urlencode({k: _query_value(v) for k, v in params.items() if v is not None}) if params else ""
        return cls(
            safe=safe,
            query=query,
            content=None if body is None else _json.dumps(body),
            content_type=content_type,
            stream=stream,
            load=load,
            retry=retry,
        )
