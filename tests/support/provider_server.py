"""A model provider on loopback that speaks the three wire formats pydantic-ai's real model classes use.

``OpenAIChatModel`` (``POST .../chat/completions``), ``OpenAIResponsesModel`` (``POST .../responses``)
and ``AnthropicModel`` (``POST .../messages``) are pointed at it through their provider's ``base_url``,
so the SDK, its HTTP client, its error mapping and pydantic-ai's adapter all run as against the real
service. Each test scripts what the provider answers, one entry per request (``script``), or one
answer for every request (``always``): a text reply, tool calls, an empty reply, an HTTP error
with its headers (``Retry-After``, ``retry-after-ms``), a request held in flight until the test
releases it (``Held``: the moment to kill the client), a stream cut midway (``Cut``), or one paused midway (``Paused``). Every request is logged with its arrival
time, path and JSON body, so a test counts requests as the provider saw them (SDK retries included)
and reads what was sent (the tools and their schemas, the tool results the model was told).
``python -m tests.support.provider_server --port P --log FILE`` runs it in a process of its own, for a
test to SIGKILL and start again on the same port.

``fakellm`` on the package index was looked at first: it speaks chat completions and messages but
not the Responses API, and is driven by a YAML file rather than per test, with no error statuses or
headers to script; this is ~200 lines of the standard library instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Text:
    """A reply with one text part."""

    text: str
    usage: tuple[int, int] = (10, 5)  # input, output tokens


@dataclass(frozen=True)
class Calls:
    """A reply with tool calls: ``(tool_name, args)`` each."""

    calls: Sequence[tuple[str, dict[str, Any]]]
    usage: tuple[int, int] = (10, 5)
    text: str | None = None


@dataclass(frozen=True)
class Empty:
    """A reply with no parts (no text, no call)."""

    usage: tuple[int, int] = (10, 0)


@dataclass(frozen=True)
class Status:
    """An HTTP error answer; ``headers`` such as ``{"Retry-After": "10"}``."""

    status: int
    message: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict)
    error_type: str | None = None  # the provider's error type/code in the body


@dataclass(frozen=True)
class Held:
    """``answer``, given only once ``release`` is set (or after ``timeout`` s): a request held in flight,
    for a test to kill the client (or the provider) while the model is "thinking". A client that is
    gone by then gets nothing, and the provider carries on."""

    answer: Text | Calls | Empty | Status
    release: threading.Event = field(default_factory=threading.Event)
    timeout: float = 300.0


@dataclass(frozen=True)
class Cut:
    """``answer`` as a stream (``stream: true``) of which only the first ``events`` events are sent, then
    the connection is closed mid-body: a stream cut mid-response. A request that does not stream gets
    the first half of its JSON body, then the close."""

    answer: Text | Calls | Empty
    events: int = 2


@dataclass(frozen=True)
class Paused:
    """``answer`` as a stream (``stream: true``) that stops after its first ``texts`` text deltas until
    ``release`` is set (or ``timeout`` s pass), then sends the rest: the moment the model is half-way
    through its reply, for a test to look at what was streamed while the step still runs."""

    answer: Text | Calls
    texts: int = 1
    release: threading.Event = field(default_factory=threading.Event)
    timeout: float = 120.0


@dataclass(frozen=True)
class Failed:
    """A Responses stream (``stream: true``) that starts, then ends with ``response.failed`` carrying
    the error ``code``: a provider that fails mid-response after its HTTP 200."""

    code: str = "server_error"
    message: str = "scripted failure"


@dataclass(frozen=True)
class Incomplete:
    """A Responses stream (``stream: true``) whose text stops at ``text`` and ends with
    ``response.incomplete`` (``max_output_tokens``): a reply cut short by the provider's own limit."""

    text: str
    usage: tuple[int, int] = (10, 5)


Answer = Text | Calls | Empty | Status | Held | Cut | Paused | Failed | Incomplete


@dataclass(frozen=True)
class Logged:
    """One request as the provider saw it."""

    at: float  # time.monotonic() at arrival
    wire: str  # chat | responses | messages
    path: str
    body: dict[str, Any]
    request_id: str


_OPENAI_ERROR = {400: "invalid_request_error", 401: "invalid_api_key", 429: "rate_limit_exceeded", 500: "server_error"}
_ANTHROPIC_ERROR = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error",
                    500: "api_error", 529: "overloaded_error"}


class ProviderServer:
    """The provider: ``url`` for OpenAI providers (``.../v1``), ``root`` for Anthropic's ``base_url``."""

    def __init__(self, port: int = 0, log_file: str | None = None) -> None:
        """``port`` 0: any free one; a fixed ``port`` lets a killed provider come back where it was.
        ``log_file``: every request is also appended there as a JSON line (for a provider run in a
        child process, which the test reads with ``read_log``)."""
        self.log: list[Logged] = []
        self._log_file = log_file
        self._script: list[Answer] = []
        self._always: Answer | Callable[[Logged], Answer] = Text("ok")
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                server._handle(self, json.loads(raw or b"{}"))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self.root = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.root}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="provider-server", daemon=True)
        self._thread.start()

    # --- scripting ---------------------------------------------------------------------------

    def script(self, *answers: Answer) -> None:
        """Answer the next requests with these, in order; after them, ``always``."""
        with self._lock:
            self._script.extend(answers)

    def always(self, answer: Answer | Callable[[Logged], Answer]) -> None:
        with self._lock:
            self._always = answer

    def requests(self, wire: str | None = None) -> list[Logged]:
        with self._lock:
            return [r for r in self.log if wire is None or r.wire == wire]

    def gaps(self) -> list[float]:
        """Seconds between consecutive requests, as they arrived."""
        at = [r.at for r in self.requests()]
        return [b - a for a, b in itertools.pairwise(at)]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # --- serving -----------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        path = h.path.split("?")[0]
        wire = "chat" if path.endswith("/chat/completions") else "responses" if path.endswith("/responses") else (
            "messages" if path.endswith("/messages") else "unknown")
        with self._lock:
            n = next(self._ids)
            entry = Logged(time.monotonic(), wire, path, body, f"req_{n}")
            self.log.append(entry)
            if self._log_file is not None:
                with open(self._log_file, "a") as f:
                    f.write(json.dumps(dataclasses.asdict(entry)) + "\n")
            answer = self._script.pop(0) if self._script else self._always
        if callable(answer):
            answer = answer(entry)
        if isinstance(answer, Held):
            answer.release.wait(answer.timeout)
            answer = answer.answer
        if isinstance(answer, (Failed, Incomplete)):
            self._fail(h, entry, answer, n)
            return
        cut = answer if isinstance(answer, Cut) else None
        paused = answer if isinstance(answer, Paused) else None
        status, headers, payload = self._render(wire, cut.answer if cut else paused.answer if paused else answer, body, n)
        streamed = _sse_events(wire, payload) if status == 200 and body.get("stream") else None
        if streamed is not None:
            data = b"".join(e for e, _ in streamed)
            content_type = "text/event-stream"
        else:
            data = json.dumps(payload).encode()
            content_type = "application/json"
        chunks = [data]
        if cut is not None:  # the headers promise the whole body; part of it comes, then the close
            chunks = [b"".join(e for e, _ in streamed[:cut.events]) if streamed is not None else data[: len(data) // 2]]
            h.close_connection = True
        elif paused is not None and streamed is not None:  # the first text deltas, the pause, the rest
            texts = list(itertools.accumulate(int(is_text) for _, is_text in streamed))
            upto = next((i + 1 for i, k in enumerate(texts) if k >= paused.texts), len(streamed))
            chunks = [b"".join(e for e, _ in streamed[:upto]), b"".join(e for e, _ in streamed[upto:])]
        try:
            h.send_response(status)
            h.send_header("Content-Type", content_type)
            h.send_header("Content-Length", str(len(data)))
            h.send_header("x-request-id" if wire != "messages" else "request-id", entry.request_id)
            for k, v in headers.items():
                h.send_header(k, v)
            h.end_headers()
            for i, chunk in enumerate(chunks):
                if i and paused is not None:
                    paused.release.wait(paused.timeout)
                h.wfile.write(chunk)
                h.wfile.flush()
        except OSError:  # the client is gone (killed while its request was held): nothing to answer
            h.close_connection = True

    def _fail(self, h: BaseHTTPRequestHandler, entry: Logged, answer: Failed | Incomplete, n: int) -> None:
        """A stream that ends with ``response.failed`` or ``response.incomplete`` (Responses wire only)."""
        if entry.wire != "responses" or not entry.body.get("stream"):
            raise NotImplementedError("a failed or incomplete stream is scripted for streamed Responses requests")
        if isinstance(answer, Failed):
            _, _, payload = self._render("responses", Empty(), entry.body, n)
            ended = {**payload, "status": "failed", "error": {"code": answer.code, "message": answer.message}}
            events = [{"type": "response.created", "response": {**payload, "status": "in_progress", "usage": None}},
                      {"type": "response.failed", "response": ended}]
        else:
            _, _, payload = self._render("responses", Text(answer.text, usage=answer.usage), entry.body, n)
            ended = {**payload, "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
            events = [json.loads(e.split(b"data: ", 1)[1]) for e, _ in _responses_sse(payload)[:-1]]
            events.append({"type": "response.incomplete", "response": ended})
        data = "".join(f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': i})}\n\n" for i, e in enumerate(events)).encode()
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Content-Length", str(len(data)))
        h.send_header("x-request-id", entry.request_id)
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()

    def _render(self, wire: str, a: Text | Calls | Empty | Status, body: dict[str, Any], n: int) -> tuple[int, dict[str, str], dict[str, Any]]:
        model = str(body.get("model") or "scripted-model")
        if isinstance(a, Status):
            if wire == "messages":
                kind = a.error_type or _ANTHROPIC_ERROR.get(a.status, "api_error")
                return a.status, a.headers, {"type": "error", "error": {"type": kind, "message": a.message}}
            code = a.error_type or _OPENAI_ERROR.get(a.status, "error")
            return a.status, a.headers, {"error": {"message": a.message, "type": code, "code": code, "param": None}}
        calls = list(a.calls) if isinstance(a, Calls) else []
        text = a.text if isinstance(a, Text) else a.text if isinstance(a, Calls) else None
        inp, out = a.usage
        if wire == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = [
                    {"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                    for i, (name, args) in enumerate(calls)
                ]
            return 200, {}, {
                "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop", "logprobs": None}],
                "usage": {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out},
            }
        if wire == "responses":
            output: list[dict[str, Any]] = []
            if text is not None:
                output.append({"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                               "content": [{"type": "output_text", "text": text, "annotations": []}]})
            for i, (name, args) in enumerate(calls):
                output.append({"type": "function_call", "id": f"fc_{n}_{i}", "call_id": f"call_{n}_{i}", "name": name,
                               "arguments": json.dumps(args), "status": "completed"})
            return 200, {}, {
                "id": f"resp_{n}", "object": "response", "created_at": int(time.time()), "model": model, "status": "completed",
                "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                "usage": {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out,
                          "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
            }
        content: list[dict[str, Any]] = []
        if text is not None:
            content.append({"type": "text", "text": text})
        for i, (name, args) in enumerate(calls):
            content.append({"type": "tool_use", "id": f"toolu_{n}_{i}", "name": name, "input": args})
        return 200, {}, {
            "id": f"msg_{n}", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": inp, "output_tokens": out},
        }


def _words(text: str) -> list[str]:
    """``text`` in the pieces a stream sends it in: each word with the spaces after it."""
    return re.findall(r"\s*\S+\s*", text) or [text]


Events = list[tuple[bytes, bool]]  # each SSE event, and whether it carries a text delta


def _data_events(chunks: list[dict[str, Any]], texts: list[bool]) -> Events:
    return [(f"data: {json.dumps(c)}\n\n".encode(), t) for c, t in zip(chunks, texts, strict=True)] + [(b"data: [DONE]\n\n", False)]


def _chat_sse(payload: dict[str, Any]) -> Events:
    """A chat completion as its chunks: the text word by word, each tool call whole, then the finish
    and the usage."""
    head = {"id": payload["id"], "object": "chat.completion.chunk", "created": payload["created"], "model": payload["model"]}
    choice = payload["choices"][0]
    message = choice["message"]
    chunks: list[dict[str, Any]] = []
    texts: list[bool] = []
    for i, word in enumerate(_words(message["content"] or "")):
        delta: dict[str, Any] = {"role": "assistant", "content": word} if i == 0 else {"content": word}
        chunks.append({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        texts.append(bool(word))
    for i, call in enumerate(message.get("tool_calls") or []):
        chunks.append({**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, **call}]}, "finish_reason": None}]})
        texts.append(False)
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    chunks.append({**head, "choices": [], "usage": payload["usage"]})
    return _data_events(chunks, [*texts, False, False])


def _responses_sse(payload: dict[str, Any]) -> Events:
    """A Responses reply as the events of its stream: created, each output item added, its text
    word by word (or its arguments), done; then completed with the whole response."""
    out: list[tuple[dict[str, Any], bool]] = []

    def add(event: dict[str, Any], text: bool = False) -> None:
        out.append(({**event, "sequence_number": len(out)}, text))

    add({"type": "response.created", "response": {**payload, "status": "in_progress", "output": [], "usage": None}})
    for i, item in enumerate(payload["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            add({"type": "response.output_item.added", "output_index": i, "item": {**item, "status": "in_progress", "content": []}})
            part = {"type": "output_text", "text": "", "annotations": []}
            add({"type": "response.content_part.added", "item_id": item["id"], "output_index": i, "content_index": 0, "part": part})
            for word in _words(text):
                add({"type": "response.output_text.delta", "item_id": item["id"], "output_index": i, "content_index": 0, "delta": word,
                     "logprobs": []}, text=bool(word))
            add({"type": "response.output_text.done", "item_id": item["id"], "output_index": i, "content_index": 0, "text": text, "logprobs": []})
            add({"type": "response.content_part.done", "item_id": item["id"], "output_index": i, "content_index": 0,
                 "part": {**part, "text": text}})
        else:
            add({"type": "response.output_item.added", "output_index": i, "item": {**item, "status": "in_progress", "arguments": ""}})
            add({"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": i, "delta": item["arguments"]})
            add({"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": i, "name": item["name"],
                 "arguments": item["arguments"]})
        add({"type": "response.output_item.done", "output_index": i, "item": item})
    add({"type": "response.completed", "response": payload})
    return [(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode(), t) for e, t in out]


def _sse(wire: str, payload: dict[str, Any]) -> bytes:
    """A rendered reply as the event stream a ``stream: true`` request gets."""
    return b"".join(e for e, _ in _sse_events(wire, payload))


def _sse_events(wire: str, payload: dict[str, Any]) -> Events:
    """A rendered reply as the events of the stream a ``stream: true`` request gets, in each wire's
    words (AnthropicModel streams its requests; helix's live output streams every wire)."""
    if wire == "chat":
        return _chat_sse(payload)
    if wire == "responses":
        return _responses_sse(payload)
    if wire != "messages":
        raise NotImplementedError(f"streaming is scripted for the chat, responses and messages wires, not {wire!r}")
    usage = payload["usage"]
    start = {**payload, "content": [], "stop_reason": None, "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 0}}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(payload["content"]):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}}))
        else:
            opened = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": opened}))
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": payload["stop_reason"], "stop_sequence": None},
                                     "usage": {"output_tokens": usage["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return [(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode(), data.get("delta", {}).get("type") == "text_delta") for name, data in events]


@contextmanager
def provider_server() -> Iterator[ProviderServer]:
    server = ProviderServer()
    try:
        yield server
    finally:
        server.close()


#: The three wire formats, by the pydantic-ai model class that speaks each.
WIRES = ("chat", "responses", "messages")


def quick_retries() -> Any:
    """A step budget of 3 requests with short delays (0.2 s, 0.4 s), so a test waits for what the
    provider asks (``Retry-After``), not for the default backoff."""
    import helix_dbos as hx

    return hx.ModelRetries(attempts=3, first_delay=0.2, backoff=2.0, jitter=0.2)


def model_for(wire: str, server: ProviderServer, model_name: str | None = None) -> Any:
    """pydantic-ai's real model class for ``wire``, its provider pointed at ``server``."""
    return model_at(wire, server.root, model_name)


def model_at(wire: str, root: str, model_name: str | None = None) -> Any:
    """pydantic-ai's real model class for ``wire``, its provider pointed at the provider at ``root``
    (``http://127.0.0.1:PORT``): for an app in another process than the provider."""
    if wire == "messages":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        return AnthropicModel(model_name or "claude-sonnet-5-5", provider=AnthropicProvider(api_key="test-key", base_url=root))
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(api_key="test-key", base_url=f"{root}/v1")
    if wire == "responses":
        from pydantic_ai.models.openai import OpenAIResponsesModel

        return OpenAIResponsesModel(model_name or "gpt-4o", provider=provider)
    from pydantic_ai.models.openai import OpenAIChatModel

    return OpenAIChatModel(model_name or "gpt-4o", provider=provider)


def sdk_model_at(wire: str, root: str, model_name: str = "gpt-4o") -> Any:
    """The OpenAI Agents SDK's own model class for ``wire`` (``OpenAIChatCompletionsModel`` for chat,
    ``OpenAIResponsesModel`` for responses), its client pointed at the provider at ``root``."""
    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="test-key", base_url=f"{root}/v1")
    if wire == "chat":
        return OpenAIChatCompletionsModel(model_name, openai_client=client)
    if wire == "responses":
        return OpenAIResponsesModel(model_name, openai_client=client)
    raise ValueError(f"the OpenAI Agents SDK speaks the chat and responses wires, not {wire!r}")


def looking_agent(sdk: str, wire: str, server: ProviderServer, name: str, model_retries: Any = None) -> Any:
    """An agent with one safe tool ``look(key) -> key`` whose model is ``sdk``'s real class for
    ``wire`` against ``server``: an ``hx.Agent`` over pydantic-ai's, or an ``agents.Agent`` read with
    ``hx.from_openai_agents``. For the tests that hold for both SDKs on the wire."""
    import helix_dbos as hx

    if sdk == "pydantic_ai":
        @hx.tool(replay="safe")
        def look(key: str) -> str:
            """Look a key up."""
            return key

        return hx.Agent(name, model_for(wire, server), tools=[look], model_retries=model_retries)
    from agents import Agent, function_tool

    tool = hx.openai_policy(function_tool(_look, name_override="look"), replay="safe")
    return hx.from_openai_agents(Agent(name=name, model=sdk_model_at(wire, server.root), tools=[tool]), model_retries=model_retries)


def _look(key: str) -> str:
    """Look a key up."""
    return key


def tools_sent(entry: Logged) -> dict[str, dict[str, Any]]:
    """The tools a request offered, by name: ``{"description", "parameters", "strict"}`` in each wire's words."""
    out: dict[str, dict[str, Any]] = {}
    for t in entry.body.get("tools") or []:
        if entry.wire == "chat":
            f = t["function"]
            out[f["name"]] = {"description": f.get("description"), "parameters": f.get("parameters"), "strict": f.get("strict")}
        elif entry.wire == "responses":
            out[t["name"]] = {"description": t.get("description"), "parameters": t.get("parameters"), "strict": t.get("strict")}
        else:
            out[t["name"]] = {"description": t.get("description"), "parameters": t.get("input_schema"), "strict": t.get("strict")}
    return out


def answer_from_json(spec: dict[str, Any]) -> Answer:
    """An answer from its JSON form, for a provider in a child process: ``{"text": ...}``,
    ``{"calls": [[name, args], ...]}``, ``{"empty": true}``, ``{"status": 500, "headers": {...}}``, each with
    an optional ``"usage": [in, out]``; ``{"held": {...}}`` holds its inner answer until the process dies."""
    if "held" in spec:
        inner = answer_from_json(spec["held"])
        assert not isinstance(inner, (Held, Cut))
        return Held(inner, timeout=float(spec.get("timeout", 3600)))
    usage = tuple(spec.get("usage", (10, 5)))
    if "text" in spec:
        return Text(spec["text"], usage=(int(usage[0]), int(usage[1])))
    if "calls" in spec:
        return Calls([(str(n), dict(a)) for n, a in spec["calls"]], usage=(int(usage[0]), int(usage[1])))
    if "status" in spec:
        return Status(int(spec["status"]), headers=dict(spec.get("headers", {})))
    return Empty()


def read_log(path: str) -> list[dict[str, Any]]:
    """The requests a provider in a child process logged (``--log``), each ``Logged`` as a dict."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m tests.support.provider_server --port P --log FILE --script JSON``: the provider in a
    process of its own, for a test to SIGKILL and start again on the same port. ``--script`` is a
    JSON list of answers (``answer_from_json``); after them every request gets ``--always`` (a text)."""
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--script", default="[]")
    p.add_argument("--always", default="ok")
    args = p.parse_args(argv)
    server = ProviderServer(port=args.port, log_file=args.log)
    server.script(*(answer_from_json(a) for a in json.loads(args.script)))
    server.always(Text(args.always))
    print(json.dumps({"serving": server.root}), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
