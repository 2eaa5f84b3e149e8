"""Optional LLM path of ``bank_process`` (design §10): an OpenAI-compatible
``/chat/completions`` endpoint, stdlib HTTP only.

Nothing needs it. ``process_content`` uses the keyword rules (``memoryd.core.bank.router.route``)
when no endpoint is configured, and falls back to them on any failure of the endpoint — refused,
slow, not 200, not JSON, not the schema, an item the validator rejects, no items — and says why in
``fallback_reason`` (``"<kind>: <detail>"``). An answer must pass the same ``ProcessedItem``
schema and ``validate_item`` checks as the rules' output, so both paths give the same shape.

The API key travels only in the Authorization header: it is never logged, never part of a failure
reason or of ``repr``. Redirects are refused (they would carry the header elsewhere) and proxies
are skipped for loopback endpoints. The caller redacts the text before it is sent.
"""

from __future__ import annotations

import ipaddress
import time
import urllib.parse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

from memoryd.banks.llm_prompt import SYSTEM_PROMPT, user_message
from memoryd.core.bank.router import ProcessedItem, route, validate_item

if TYPE_CHECKING:
    # urllib.request and http.client are imported where a request is made: with them comes
    # ssl (OpenSSL's libcrypto, ~4 MB resident), which a daemon without an endpoint never uses.
    import urllib.request
    from http.client import HTTPResponse

MAX_ANSWER_BYTES = 1 << 20
MAX_LLM_ITEMS = 200

FailureKind = Literal[
    "connection",  # refused, unreachable, reset, TLS
    "timeout",  # no complete answer within timeout_s
    "http_status",  # any status but 200 (redirects included)
    "invalid_response",  # not a chat completion envelope, or too large
    "invalid_json",  # the message is not JSON
    "schema",  # JSON, but not a list of ProcessedItem (unknown file, operation, field, size)
    "invalid_item",  # the schema holds but validate_item refuses an item
    "empty",  # no items
    "unexpected",  # anything else; only the exception type is kept
]


class LlmFailure(Exception):
    """The endpoint gave no usable answer; ``str()`` is ``"<kind>: <detail>"``."""

    def __init__(self, kind: FailureKind, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind: FailureKind = kind


class ProcessResult(msgspec.Struct, frozen=True):
    """Items of ``bank_process``; ``fallback_reason`` is set when the LLM was tried and failed."""

    items: list[ProcessedItem]
    source: Literal["llm", "rules"]
    fallback_reason: str | None = None


class _Message(msgspec.Struct):
    content: str


class _Choice(msgspec.Struct):
    message: _Message


class _Completion(msgspec.Struct):
    choices: Annotated[list[_Choice], msgspec.Meta(min_length=1)]


_Items = Annotated[list[ProcessedItem], msgspec.Meta(max_length=MAX_LLM_ITEMS)]


def _opener(loopback: bool) -> urllib.request.OpenerDirector:
    """urllib's opener: redirects refused (urllib then raises HTTPError for the 3xx), and no
    proxy for a loopback endpoint."""
    import urllib.request

    class RefuseRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    handlers: list[urllib.request.BaseHandler] = [RefuseRedirects()]
    if loopback:
        handlers.append(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)


class LlmProcessor:
    """Client of one OpenAI-compatible endpoint (``base_url`` up to, not including,
    ``/chat/completions``, e.g. ``http://127.0.0.1:8080/v1``)."""

    def __init__(
        self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 10.0
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self._api_key = api_key or None
        self._opener: urllib.request.OpenerDirector | None = None  # made by the first request

    def __repr__(self) -> str:
        key = "'***'" if self._api_key else "None"
        return f"LlmProcessor(url={self.url!r}, model={self.model!r}, api_key={key})"

    def process(self, text: str, now: datetime | None = None) -> list[ProcessedItem] | None:
        """Validated items for ``text``, or None on any failure (the caller falls back)."""
        try:
            return self.request_items(text, now)
        except LlmFailure:
            return None

    def request_items(self, text: str, now: datetime | None = None) -> list[ProcessedItem]:
        """Validated items for ``text``; raises ``LlmFailure`` (only) when there are none."""
        try:
            body = msgspec.json.encode(
                {
                    "model": self.model,
                    "temperature": 0,
                    "messages": [
                        {"role": "system", "content": SYSTEM_PROMPT},
                        {"role": "user", "content": user_message(text, now or datetime.now(UTC))},
                    ],
                }
            )
            return _decode_items(_answer_text(self._post(body)))
        except LlmFailure:
            raise
        except Exception as exc:  # the contract is "never raise but LlmFailure"
            raise LlmFailure("unexpected", type(exc).__name__) from None

    def _post(self, body: bytes) -> bytes:
        import urllib.error
        import urllib.request
        from http.client import HTTPException

        request = urllib.request.Request(self.url, data=body, method="POST")
        request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json")
        if self._api_key:
            request.add_unredirected_header("Authorization", f"Bearer {self._api_key}")
        deadline = time.monotonic() + self.timeout_s
        if self._opener is None:
            self._opener = _opener(_is_loopback(self.url))
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                if response.status != 200:
                    raise LlmFailure("http_status", f"HTTP {response.status}")
                return self._read(response, deadline)
        except urllib.error.HTTPError as exc:
            exc.close()
            raise LlmFailure("http_status", f"HTTP {exc.code}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise self._timeout() from None
            raise LlmFailure("connection", _describe(exc.reason)) from None
        except TimeoutError:
            raise self._timeout() from None
        except (OSError, HTTPException) as exc:
            raise LlmFailure("connection", _describe(exc)) from None

    def _read(self, response: HTTPResponse, deadline: float) -> bytes:
        # The socket timeout bounds each read; the deadline bounds a server that trickles.
        chunks: list[bytes] = []
        size = 0
        while chunk := response.read(64 * 1024):
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise LlmFailure("invalid_response", f"answer larger than {MAX_ANSWER_BYTES} bytes")
            if time.monotonic() > deadline:
                raise self._timeout()
            chunks.append(chunk)
        return b"".join(chunks)

    def _timeout(self) -> LlmFailure:
        return LlmFailure("timeout", f"no complete answer within {self.timeout_s:g} s")


def process_content(text: str, llm: LlmProcessor | None, now: datetime) -> ProcessResult:
    """``bank_process``: the LLM's items when an LLM is configured and answers validly, else the
    rules' items. Blank text never reaches the LLM (there is nothing to file)."""
    if llm is None or not text.strip():
        return ProcessResult(route(text, now), "rules")
    try:
        return ProcessResult(llm.request_items(text, now), "llm")
    except LlmFailure as failure:
        return ProcessResult(route(text, now), "rules", str(failure))


def _answer_text(raw: bytes) -> str:
    try:
        completion = msgspec.json.decode(raw, type=_Completion)
    except msgspec.DecodeError as exc:
        raise LlmFailure("invalid_response", f"not a chat completion ({exc})") from None
    return completion.choices[0].message.content


def _decode_items(answer: str) -> list[ProcessedItem]:
    payload = answer.strip()
    if payload.startswith("```") and payload.endswith("```"):  # a fenced answer is common
        payload = payload[3:-3].removeprefix("json").strip()
    try:
        items = msgspec.json.decode(payload, type=_Items)
    except msgspec.ValidationError as exc:
        raise LlmFailure("schema", str(exc)) from None
    except msgspec.DecodeError:
        raise LlmFailure("invalid_json", "the answer is not a JSON document") from None
    if not items:
        raise LlmFailure("empty", "the answer holds no items")
    for number, item in enumerate(items):
        if (why := validate_item(item)) is not None:
            raise LlmFailure("invalid_item", f"item {number}: {why}")
    return items


def _describe(reason: object) -> str:
    # The type name, and errno text when there is one: never the URL (it may hold credentials).
    strerror = getattr(reason, "strerror", None)
    return f"{type(reason).__name__}: {strerror}" if strerror else type(reason).__name__


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
