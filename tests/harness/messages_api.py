"""A Messages API on 127.0.0.1 that plays a scripted session: what the agent backends' real
clients (``anthropic``, ``claude-agent-sdk`` and the Claude Code CLI) talk to in the tests.

It speaks what those clients send and read: ``POST /v1/messages`` (any query string, e.g. the
CLI's ``?beta=true``) answered as one JSON message, or as server-sent events when the request
says ``"stream": true`` (``message_start``, ``content_block_start`` / ``_delta`` / ``_stop``
with ``text_delta`` and ``input_json_delta``, ``message_delta`` with the stop reason and the
output tokens, ``message_stop``); ``POST /v1/messages/count_tokens``; ``HEAD /api/hello`` (the
CLI's reachability probe). Anything else is a 404 in the API's error shape, recorded. Given a
``key``, a POST without it gets the API's 401 ``authentication_error``.

The session is a list of turns. A request belongs to the session when its ``tools`` name every
one of ``Script.tools``; its turn is the number of assistant messages already in its
conversation, so a retried request gets the same turn again and the order of side requests
does not matter. Each turn is a function of a :class:`Turn` (the request, the results of the
conversation's tool calls by id, the working directory the conversation names) returning the
content blocks of the reply; tool_use blocks stop with ``tool_use``, text alone with
``end_turn``. A request past the last turn gets a 400 ``script exhausted``. Requests outside
the session (a CLI's title or summary calls) get a one-word text reply and are counted apart.

Every reply carries ``usage`` (input, cache write and cache read tokens from the turn's
``usage``, output tokens); the server keeps what it served so a test can check what a backend
recorded against it.

Below the server: the scripted sessions the tests play (:func:`claude_code_session`,
:func:`declined_session`) and where the real clients are (:func:`claude_cli`,
:func:`agent_sdk`), each saying what is missing when one is not installed.
"""
from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

CWD = re.compile(r"[Ww]orking directory: (/[^\s`'\"]+)")


@dataclass
class Turn:
    index: int
    request: dict
    results: dict  # tool_use_id -> the text of its tool_result, whole conversation
    errors: set  # tool_use_ids whose tool_result has is_error set

    def text(self) -> str:
        """Every string of the request (system and messages), joined: what the model saw."""
        out = []

        def walk(x):
            if isinstance(x, str):
                out.append(x)
            elif isinstance(x, dict):
                for v in x.values():
                    walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)
        walk(self.request.get("system"))
        walk(self.request.get("messages"))
        return "\n".join(out)

    def cwd(self) -> str:
        found = CWD.search(self.text())
        if not found:
            raise AssertionError("the scripted model expected the request to name its working "
                                 "directory ('working directory: /...'), found none")
        return found.group(1)

    def result(self, index: int, k: int = 0) -> str:
        """The tool_result text of tool call ``k`` of turn ``index``."""
        key = tool_id(index, k)
        if key not in self.results:
            raise AssertionError(f"turn {self.index}: expected the result of {key}, found "
                                 f"{sorted(self.results)}")
        return self.results[key]


def tool_id(turn: int, k: int = 0) -> str:
    return f"toolu_{turn:02d}_{k}"


def tool_use(turn: int, name: str, k: int = 0, **inp) -> dict:
    return {"type": "tool_use", "id": tool_id(turn, k), "name": name, "input": inp}


def text(s: str) -> dict:
    return {"type": "text", "text": s}


@dataclass
class Script:
    turns: list  # each: Callable[[Turn], list[dict]] or a list of content blocks
    tools: tuple = ()  # a request is the session's when its tools name all of these
    usage: Callable[[int], dict] = field(
        default=lambda i: {"input_tokens": 1000 + 100 * i, "output_tokens": 40 + i,
                           "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})


def _result_text(block: dict) -> str:
    c = block.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "\n".join(x.get("text", "") for x in c if isinstance(x, dict))
    return ""


class MessagesAPI:
    """``with MessagesAPI(script) as api: ...``; ``api.url`` is the base URL."""

    def __init__(self, script: Script, model: str = "claude-sonnet-4-5", key: str | None = None):
        # key: when given, a POST without it in x-api-key gets the API's 401 (as a wrong key does)
        self.script, self.model, self.key = script, model, key
        self.requests: list[dict] = []  # every request: method, path, headers, body
        self.served: list[dict] = []  # the session's replies: turn, usage, content
        self.side: list[dict] = []  # replies to requests outside the session
        self.errors: list[str] = []  # what the server refused, and why
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_HEAD(self):
                api._handle(self, "HEAD")

            def do_GET(self):
                api._handle(self, "GET")

            def do_POST(self):
                api._handle(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- what a test reads back
    def session_requests(self) -> list[dict]:
        return [r["body"] for r in self.requests if r.get("session")]

    def tool_results(self) -> dict:
        """tool_use_id -> tool_result block, over the conversation of the session's last
        request: what the client sent back for each tool call."""
        body = self.session_requests()[-1]
        return {b.get("tool_use_id"): b for m in body["messages"] if m.get("role") == "user"
                and isinstance(m.get("content"), list) for b in m["content"]
                if isinstance(b, dict) and b.get("type") == "tool_result"}

    def all_tokens(self) -> tuple[int, int]:
        """(input, output) over every reply, the session's and the side requests'."""
        i, o = self.served_tokens()
        return (i + sum(s["usage"]["input_tokens"] for s in self.side),
                o + sum(s["usage"]["output_tokens"] for s in self.side))

    def served_tokens(self) -> tuple[int, int]:
        """(input incl. cache write and read, output) over the session's replies."""
        i = sum(s["usage"]["input_tokens"] + s["usage"].get("cache_creation_input_tokens", 0)
                + s["usage"].get("cache_read_input_tokens", 0) for s in self.served)
        return i, sum(s["usage"]["output_tokens"] for s in self.served)

    # ---- the server
    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        n = int(h.headers.get("content-length") or 0)
        raw = h.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = h.path.split("?")[0]
        rec = {"method": method, "path": h.path, "body": body,
               "headers": {k.lower(): v for k, v in h.headers.items()}}
        with self.lock:
            self.requests.append(rec)
        if method == "HEAD" or (method == "GET" and path == "/api/hello"):
            return self._send(h, 200, {})
        if self.key is not None and method == "POST" and rec["headers"].get("x-api-key") != self.key:
            return self._error(h, 401, "authentication_error", "invalid x-api-key")
        if method != "POST" or path not in ("/v1/messages", "/v1/messages/count_tokens"):
            return self._error(h, 404, "not_found_error", f"expected POST /v1/messages, found "
                                                          f"{method} {h.path}")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return self._error(h, 400, "invalid_request_error",
                               f"expected a JSON body with messages, found {raw[:200]!r}")
        if path.endswith("count_tokens"):
            return self._send(h, 200, {"input_tokens": max(1, len(raw) // 4)})
        names = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        mine = bool(self.script.tools) and set(self.script.tools) <= names
        rec["session"] = mine
        if not mine:
            usage = {"input_tokens": 10, "output_tokens": 1}
            with self.lock:
                self.side.append({"model": body.get("model"), "usage": usage})
            return self._reply(h, body, [text("OK")], "end_turn", usage)
        index = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        if index >= len(self.script.turns):
            return self._error(h, 400, "invalid_request_error",
                               f"script exhausted: turn {index} asked, the script has "
                               f"{len(self.script.turns)}")
        results, errors = {}, set()
        for m in body["messages"]:
            if m.get("role") == "user" and isinstance(m.get("content"), list):
                for b in m["content"]:
                    if isinstance(b, dict) and b.get("type") == "tool_result":
                        results[b.get("tool_use_id")] = _result_text(b)
                        if b.get("is_error"):
                            errors.add(b.get("tool_use_id"))
        turn = Turn(index, body, results, errors)
        step = self.script.turns[index]
        try:
            content = step(turn) if callable(step) else list(step)
        except AssertionError as e:  # the script cannot go on: say so to the client and test
            return self._error(h, 400, "invalid_request_error", f"turn {index}: {e}")
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        usage = dict(self.script.usage(index))
        with self.lock:
            self.served.append({"turn": index, "usage": usage, "content": content})
        return self._reply(h, body, content, stop, usage)

    def _error(self, h, code: int, kind: str, message: str) -> None:
        with self.lock:
            self.errors.append(message)
        self._send(h, code, {"type": "error", "error": {"type": kind, "message": message}})

    def _send(self, h, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        h.send_response(code)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        h.send_header("request-id", f"req_{len(self.requests)}")
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)

    def _reply(self, h, body: dict, content: list, stop: str, usage: dict) -> None:
        msg_id = f"msg_{len(self.requests):04d}"
        model = body.get("model") or self.model
        if not body.get("stream"):
            return self._send(h, 200, {"id": msg_id, "type": "message", "role": "assistant",
                                       "model": model, "content": content,
                                       "stop_reason": stop, "stop_sequence": None,
                                       "usage": usage})
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("cache-control", "no-cache")
        h.send_header("request-id", f"req_{len(self.requests)}")
        h.end_headers()

        def event(kind: str, data: dict) -> None:
            h.wfile.write(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode())

        start_usage = {**usage, "output_tokens": 1}
        event("message_start", {"message": {"id": msg_id, "type": "message", "role": "assistant",
                                            "model": model, "content": [], "stop_reason": None,
                                            "stop_sequence": None, "usage": start_usage}})
        for i, b in enumerate(content):
            if b["type"] == "text":
                event("content_block_start", {"index": i, "content_block": {"type": "text",
                                                                            "text": ""}})
                event("content_block_delta", {"index": i, "delta": {"type": "text_delta",
                                                                    "text": b["text"]}})
            else:
                event("content_block_start", {"index": i, "content_block": {
                    "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
                js = json.dumps(b["input"])
                half = len(js) // 2  # in two pieces, as the API streams it
                for piece in (js[:half], js[half:]):
                    event("content_block_delta", {"index": i, "delta": {
                        "type": "input_json_delta", "partial_json": piece}})
            event("content_block_stop", {"index": i})
        event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                "usage": {"output_tokens": usage["output_tokens"]}})
        event("message_stop", {})
        h.wfile.flush()
        h.close_connection = True


# ---- the scripted sessions ------------------------------------------------------------------

QUICK = re.compile(r"Quick test: `([^`]+)`")


def quick_test_of(turn: Turn) -> str:
    found = QUICK.search(turn.text())
    if not found:
        raise AssertionError("the scripted model expected the brief to name its quick test "
                             "('Quick test: `...`'), found none")
    return found.group(1)


def claude_code_session(path: str, old: str, new: str, message: str,
                        refused: tuple[str, str] | None = None) -> Script:
    """Claude Code's own tools: Read the kernel file ``path`` (relative to the working
    directory the CLI names), Edit ``old`` into ``new``, run the brief's quick test with Bash,
    ``git commit`` with Bash, then a last word. With ``refused`` (a protected path and a text
    in it) it also reads that file and first tries an Edit of that text, which must come back
    as an error naming the rule (the backend's permission hook)."""
    steps: list = []

    def read(t: Turn):
        blocks = [text(f"Reading {path}."), tool_use(t.index, "Read", file_path=f"{t.cwd()}/{path}")]
        if refused:
            blocks.append(tool_use(t.index, "Read", k=1, file_path=f"{t.cwd()}/{refused[0]}"))
        return blocks
    steps.append(read)

    if refused:
        def try_protected(t: Turn):
            return [tool_use(t.index, "Edit", file_path=f"{t.cwd()}/{refused[0]}",
                             old_string=refused[1], new_string=refused[1] + "  # edited")]
        steps.append(try_protected)

    def edit(t: Turn):
        if refused:
            got = t.result(t.index - 1)
            if tool_id(t.index - 1) not in t.errors or "protected" not in got:
                raise AssertionError(f"expected the Edit of {refused[0]} refused as protected, "
                                     f"found {got!r}")
        seen = t.result(0)
        if old not in seen:
            raise AssertionError(f"expected Read to show {old!r}, found {seen[:300]!r}")
        return [tool_use(t.index, "Edit", file_path=f"{t.cwd()}/{path}", old_string=old,
                         new_string=new)]
    steps.append(edit)

    def quick(t: Turn):
        if tool_id(t.index - 1) in t.errors:
            raise AssertionError(f"expected the Edit to succeed, found {t.result(t.index - 1)!r}")
        return [tool_use(t.index, "Bash", command=quick_test_of(t), description="Run the quick test")]
    steps.append(quick)

    def commit(t: Turn):
        t.result(t.index - 1)
        return [tool_use(t.index, "Bash", command=f"git add {path} && git commit -q -m '{message}'",
                         description="Commit the change")]
    steps.append(commit)

    def done(t: Turn):
        if tool_id(t.index - 1) in t.errors:
            raise AssertionError(f"expected git commit to succeed, found {t.result(t.index - 1)!r}")
        return [text(f"Committed: {message}")]
    steps.append(done)
    return Script(steps, tools=("Read", "Edit", "Bash"))


# ---- where the real clients are -------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
# .ci/run installs the npm package here (git-ignored); KERN_CLAUDE_CLI names another binary
NPM_PREFIX = ROOT / ".tools" / "node"
NPM_INSTALL = "npm install --prefix .tools/node --no-save @anthropic-ai/claude-code@2.1.332"


def claude_cli() -> tuple[str | None, str]:
    """(the Claude Code CLI from npm, '') or (None, what is missing and how to install it)."""
    import os
    import shutil

    named = os.environ.get("KERN_CLAUDE_CLI")
    if named:
        return (named, "") if os.access(named, os.X_OK) else \
            (None, f"KERN_CLAUDE_CLI={named} is not an executable file")
    local = NPM_PREFIX / "node_modules" / ".bin" / "claude"
    if local.exists():
        return str(local), ""
    found = shutil.which("claude")
    if found:
        return found, ""
    return None, (f"the Claude Code CLI is not installed: no {local.relative_to(ROOT)}, no "
                  f"`claude` on PATH; install it with `{NPM_INSTALL}` (what .ci/run does)")


def agent_sdk() -> tuple[object | None, str]:
    """(the claude_agent_sdk module, '') when it and a CLI it can drive are installed; else
    (None, what is missing)."""
    import importlib
    import shutil

    try:
        sdk = importlib.import_module("claude_agent_sdk")
    except ImportError:
        return None, "claude-agent-sdk is not installed: pip install -e '.[dev]'"
    bundled = Path(sdk.__file__).parent / "_bundled" / "claude"
    if not bundled.exists() and not shutil.which("claude"):
        return None, (f"claude-agent-sdk {getattr(sdk, '__version__', '?')} has no bundled "
                      f"CLI ({bundled}) and no `claude` is on PATH: `{NPM_INSTALL}` and put "
                      f"{NPM_PREFIX / 'node_modules/.bin'} on PATH")
    return sdk, ""


def declined_session(path: str, idea: str, estimate_ms: float) -> Script:
    """Claude Code's tools: Read ``path``, then decline: the last line of the final message is
    ``{"declined": idea, "estimate_ms": estimate_ms}``, as the brief's closing asks."""
    def read(t: Turn):
        return [tool_use(t.index, "Read", file_path=f"{t.cwd()}/{path}")]

    def decline(t: Turn):
        t.result(0)
        return [text(f"Nothing worth committing here.\n"
                     f"{json.dumps({'declined': idea, 'estimate_ms': estimate_ms})}")]
    return Script([read, decline], tools=("Read", "Edit", "Bash"))


def any_claude_cli() -> tuple[str | None, str]:
    """A Claude Code CLI to run as ``claude -p``: the npm one (:func:`claude_cli`), else the one
    the claude-agent-sdk wheel ships (a dev dependency: every test install has it)."""
    cli, missing = claude_cli()
    if cli is not None:
        return cli, ""
    try:
        import claude_agent_sdk
    except ImportError:
        return None, missing + "; nor is claude-agent-sdk (pip install -e '.[dev]')"
    bundled = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return (str(bundled), "") if bundled.exists() else (None, f"{missing}; nor does {bundled} exist")
