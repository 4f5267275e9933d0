"""The anthropic backend: a tool-use loop on the Messages API (the ``anthropic`` SDK).

System prompt = the brief's text. Tools: ``read_file``, ``list_files`` (anywhere in the
worktree, never outside it), ``edit_file`` / ``write_file`` (only paths matching the brief's
editable globs and no protected one; a refusal comes back as a tool error naming the rule),
``run_quick_test`` / ``run_quick_bench`` (the brief's commands in the worktree, with a minimal
environment that holds no API key, and a time limit), and ``finish``: ``commit`` stages the
files the agent edited and commits them once; ``declined`` leaves the tree as it is and
reports the idea with its estimate.

Settings (kern.yaml ``agent:``, harness/settings.py ``Agent``): ``model``, ``max_turns`` (API
calls), ``max_tokens`` (per response), ``quick_timeout_s``, ``base_url``, ``max_retries``,
``prices`` ({model prefix: [input, output] USD per million tokens}, merged over
:data:`PRICES_PER_MTOK`), ``max_budget_usd`` (the attempt fails once its cost reaches it). The
API key comes from ``api_key=`` context or ``ANTHROPIC_API_KEY``; only this process sees it.

Tokens and cost are summed over every response's ``usage``; the transcript (one JSON object
a line: the brief, each response, each tool call and its result) goes to
``attempt-N.anthropic.jsonl`` beside the worktree, never inside it.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .base import Brief, Proposal
from ..settings import Agent
from .common import TOOL_ENV, GitError, git, minimal_env, run_limited, transcript_path
from .rules import PathRefused, edit_check, resolve_in_tree

# USD per million tokens (input, output), by model-name prefix; the longest matching prefix
# wins. Prices change: override or extend with agent.prices in kern.yaml. Cache writes are
# billed at 1.25x input and cache reads at 0.1x input.
PRICES_PER_MTOK = {
    "claude-sonnet-4": (3.0, 15.0),
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4-0": (15.0, 75.0),
    "claude-opus-4-2025": (15.0, 75.0),
}
READ_CAP = 100_000  # characters of a file per read_file call; larger files are read by offset
LIST_CAP = 500
KICKOFF = ("Begin. The brief is in the system prompt. Read the code you need, make your change "
           "with edit_file or write_file, check it with run_quick_test and run_quick_bench, and "
           "end with finish: kind 'commit' with a commit message, or kind 'declined' with the "
           "idea and estimate_ms (your estimated change of the score in ms; negative = faster).")
NUDGE = "Use the tools. When you are done, call finish (kind 'commit' or 'declined')."


@dataclass
class Tally:
    input: int = 0
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0

    def add(self, usage) -> None:
        def n(name):
            v = getattr(usage, name, None) if not isinstance(usage, dict) else usage.get(name)
            return int(v or 0)
        self.input += n("input_tokens")
        self.output += n("output_tokens")
        self.cache_write += n("cache_creation_input_tokens")
        self.cache_read += n("cache_read_input_tokens")

    @property
    def tokens_in(self) -> int:
        return self.input + self.cache_write + self.cache_read


def price_for(model: str, prices: dict) -> tuple[float, float] | None:
    best = max((p for p in prices if model.startswith(p)), key=len, default=None)
    return None if best is None else tuple(prices[best])


def cost_usd(tally: Tally, price: tuple[float, float] | None) -> float:
    if price is None:
        return 0.0
    pin, pout = price
    return (tally.input * pin + tally.cache_write * 1.25 * pin + tally.cache_read * 0.1 * pin
            + tally.output * pout) / 1e6


def tool_specs(brief: Brief) -> list[dict]:
    rules = (f"Allowed: paths matching {brief.editable} and none of {brief.protected} "
             f"(relative to the worktree root).")
    obj = lambda props, req: {"type": "object", "properties": props, "required": req}
    s = {"type": "string"}
    return [
        {"name": "read_file", "description": "Read a text file of the worktree (path relative to "
         f"its root). At most {READ_CAP} characters per call; pass offset for more.",
         "input_schema": obj({"path": s, "offset": {"type": "integer"}}, ["path"])},
        {"name": "list_files", "description": "List the worktree's files matching a glob, e.g. "
         "'kernels/k31/moe/*.py' or '**/tunables.py'.",
         "input_schema": obj({"glob": s}, ["glob"])},
        {"name": "edit_file", "description": "Replace the one occurrence of `old` in a file with "
         "`new` (`old` must occur exactly once). " + rules,
         "input_schema": obj({"path": s, "old": s, "new": s}, ["path", "old", "new"])},
        {"name": "write_file", "description": "Create or overwrite a file with `content`. " + rules,
         "input_schema": obj({"path": s, "content": s}, ["path", "content"])},
        {"name": "run_quick_test", "description": "Run the quick correctness test in the "
         f"worktree: `{brief.quick_test or '(none configured)'}`. Returns its exit status and "
         "the end of its output.", "input_schema": obj({}, [])},
        {"name": "run_quick_bench", "description": "Run the quick timing in the worktree: "
         f"`{brief.quick_bench or '(none configured)'}`. Returns its exit status and the end of "
         "its output.", "input_schema": obj({}, [])},
        {"name": "finish", "description": "End the attempt. kind 'commit': commit every file you "
         "edited, once, with `message` as the commit message. kind 'declined': change nothing "
         "and report `message` as the idea with `estimate_ms` (estimated change of the score "
         "in ms; negative = faster).",
         "input_schema": obj({"kind": {"type": "string", "enum": ["commit", "declined"]},
                              "message": s, "estimate_ms": {"type": "number"}},
                             ["kind", "message"])},
    ]


class ToolError(Exception):
    """A tool call the agent got wrong; the message goes back to it as a tool error."""


class Workbench:
    """The tools, bound to one worktree and one brief. Every method returns the text for the
    tool_result or raises :class:`ToolError`."""

    def __init__(self, worktree: Path, brief: Brief, quick_timeout_s: float, backend: str):
        self.worktree, self.brief = Path(worktree), brief
        self.root = self.worktree.resolve()
        self.quick_timeout_s, self.backend = quick_timeout_s, backend
        self.touched: set[str] = set()  # files written through edit_file/write_file
        self.outcome: Proposal | None = None

    def call(self, name: str, args: dict) -> str:
        if self.outcome is not None:
            raise ToolError("finish was already called; nothing more runs in this attempt")
        fn = getattr(self, f"tool_{name}", None)
        if fn is None:
            raise ToolError(f"unknown tool {name!r}")
        if not isinstance(args, dict):
            raise ToolError(f"expected an object of arguments, found {args!r}")
        try:
            return fn(**args)
        except TypeError as e:  # missing or unexpected arguments
            raise ToolError(f"{name}: {e}") from None

    def tool_read_file(self, path, offset=0) -> str:
        try:
            real, _ = resolve_in_tree(self.worktree, path)
        except PathRefused as e:
            raise ToolError(f"refused: {e}") from None
        if not real.is_file():
            raise ToolError(f"{path!r}: expected a file, found {'a directory' if real.is_dir() else 'nothing'}")
        text = real.read_text(encoding="utf-8", errors="replace")
        offset = max(0, int(offset or 0))
        chunk = text[offset:offset + READ_CAP]
        rest = len(text) - offset - len(chunk)
        return chunk + (f"\n[... {rest} more characters: read_file with offset="
                        f"{offset + len(chunk)}]" if rest > 0 else "")

    def tool_list_files(self, glob) -> str:
        if not isinstance(glob, str) or not glob.strip():
            raise ToolError(f"expected a glob such as 'kernels/**/*.py', found {glob!r}")
        pat = PurePosixPath(glob)
        if pat.is_absolute() or ".." in pat.parts:
            raise ToolError(f"refused: {glob!r} leaves the worktree (globs are relative to its root)")
        found = []
        for p in self.root.glob(glob):
            rel = p.relative_to(self.root)
            if ".git" in rel.parts or not p.is_file():
                continue
            try:  # a symlink to outside the worktree is not listed
                p.resolve().relative_to(self.root)
            except ValueError:
                continue
            found.append(rel.as_posix())
        found.sort()
        more = len(found) - LIST_CAP
        return "\n".join(found[:LIST_CAP]) + (f"\n[... {more} more]" if more > 0 else "") \
            if found else f"no files match {glob!r}"

    def _writable(self, path) -> Path:
        real, why = edit_check(self.worktree, path, self.brief.editable, self.brief.protected)
        if real is None:
            raise ToolError(f"refused: {why}")
        return real

    def tool_edit_file(self, path, old, new) -> str:
        real = self._writable(path)
        if not real.is_file():
            raise ToolError(f"{path!r} does not exist; use write_file to create it")
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise ToolError("expected `old` (non-empty text of the file) and `new` as strings")
        text = real.read_text(encoding="utf-8")
        n = text.count(old)
        if n != 1:
            raise ToolError(f"`old` occurs {n} times in {path}; expected exactly once "
                            f"(include more surrounding lines)")
        real.write_text(text.replace(old, new, 1), encoding="utf-8")
        self.touched.add(real.relative_to(self.root).as_posix())
        return f"edited {path}"

    def tool_write_file(self, path, content) -> str:
        real = self._writable(path)
        if not isinstance(content, str):
            raise ToolError(f"expected `content` as a string, found {type(content).__name__}")
        real.parent.mkdir(parents=True, exist_ok=True)
        real.write_text(content, encoding="utf-8")
        self.touched.add(real.relative_to(self.root).as_posix())
        return f"wrote {len(content)} characters to {path}"

    def _run(self, what: str, cmd: str) -> str:
        if not cmd.strip():
            raise ToolError(f"no {what} is configured for this brief")
        # PYTHONPATH = the worktree: the candidate's code is what gets tested, not an
        # installed copy; the environment holds no API key (the candidate is agent-written)
        env = minimal_env(TOOL_ENV, extra={"PYTHONPATH": str(self.worktree),
                                          "PYTHONUNBUFFERED": "1"})
        ran = run_limited(cmd, cwd=self.worktree, env=env, timeout_s=self.quick_timeout_s)
        head = (f"timed out after {self.quick_timeout_s:g}s" if ran.timed_out
                else f"exit status {ran.returncode}")
        return f"{what}: {head} ({ran.wall_s:.1f}s)\n{ran.tail}"

    def tool_run_quick_test(self) -> str:
        return self._run("quick test", self.brief.quick_test)

    def tool_run_quick_bench(self) -> str:
        return self._run("quick bench", self.brief.quick_bench)

    def tool_finish(self, kind, message, estimate_ms=None) -> str:
        if not isinstance(message, str) or not message.strip():
            raise ToolError("finish: expected a non-empty message (the commit message or the idea)")
        if kind == "declined":
            if isinstance(estimate_ms, bool) or not isinstance(estimate_ms, (int, float)):
                raise ToolError(f"finish declined: expected estimate_ms, your estimated score "
                                f"change in ms (negative = faster), found {estimate_ms!r}")
            self.outcome = Proposal(kind="declined", message=message.strip(),
                                    estimate_ms=float(estimate_ms))
            return "declined; the attempt ends"
        if kind != "commit":
            raise ToolError(f"finish: expected kind 'commit' or 'declined', found {kind!r}")
        if not self.touched:
            raise ToolError("finish commit: you have edited no file; edit first, or finish "
                            "with kind 'declined'")
        # only the files the agent wrote: a quick test's byproducts must not enter the commit
        try:
            git(self.worktree, "add", "-A", "--", *sorted(self.touched), backend=self.backend)
            staged = git(self.worktree, "diff", "--cached", "--name-only", backend=self.backend)
            if not staged.strip():
                raise ToolError("finish commit: your edits leave every file as it was on main; "
                                "nothing to commit")
            git(self.worktree, "commit", "--no-verify", "-q", "-m", message.strip(),
                backend=self.backend)
        except GitError as e:
            raise ToolError(f"finish commit failed: {e}") from None
        self.outcome = Proposal(kind="commit", message=message.strip())
        return "committed; the attempt ends"


def _block_param(block) -> dict:
    """A response content block as a request content block."""
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    return block.model_dump(exclude_none=True)


class AnthropicAgent:
    name = "anthropic"

    def __init__(self, settings: Agent, *, api_key: str | None = None, base_url: str | None = None,
                 client=None, transcript_dir=None):
        # kern.yaml's ranges (harness/settings.py) hold for every value read here
        self.model, self.max_turns, self.max_tokens = settings.model, settings.max_turns, settings.max_tokens
        self.quick_timeout_s, self.max_retries = settings.quick_timeout_s, settings.max_retries
        self.max_budget_usd = settings.max_budget_usd
        self.prices = {**PRICES_PER_MTOK, **settings.prices}
        self.base_url = base_url or settings.base_url or None
        self.api_key, self.client, self.transcript_dir = api_key, client, transcript_dir

    def _client(self):
        if self.client is None:
            import anthropic

            self.client = anthropic.Anthropic(api_key=self.api_key, base_url=self.base_url,
                                              max_retries=self.max_retries)
        return self.client

    def propose(self, brief: Brief, worktree) -> Proposal:
        worktree = Path(worktree)
        path = transcript_path(worktree, brief.attempt, self.name, "jsonl", self.transcript_dir)
        tally = Tally()
        price = price_for(self.model, self.prices)
        bench = Workbench(worktree, brief, self.quick_timeout_s, self.name)
        tools = tool_specs(brief)
        messages: list[dict] = [{"role": "user", "content": KICKOFF}]

        with open(path, "w", encoding="utf-8") as log:
            def record(event: str, **data):
                log.write(json.dumps({"t": round(time.time(), 3), "event": event, **data},
                                     default=str) + "\n")
                log.flush()  # a killed process still leaves what happened so far

            def done(p: Proposal) -> Proposal:
                p.tokens_in, p.tokens_out = tally.tokens_in, tally.output
                p.cost_usd, p.transcript = round(cost_usd(tally, price), 6), str(path)
                record("end", proposal=p.as_dict())
                return p

            record("brief", attempt=brief.attempt, target=brief.target, model=self.model,
                   system=brief.text, tools=[t["name"] for t in tools])
            if price is None:
                record("note", text=f"no price known for {self.model}: cost recorded as 0; "
                                    f"add agent.prices in kern.yaml")
            try:
                client = self._client()
                for turn in range(1, self.max_turns + 1):
                    spent = cost_usd(tally, price)
                    if self.max_budget_usd is not None and spent >= self.max_budget_usd:
                        return done(Proposal(kind="failed", reason=(
                            f"cost cap reached: ${spent:.4f} of agent.max_budget_usd "
                            f"${self.max_budget_usd:g} after {turn - 1} turns")))
                    resp = client.messages.create(model=self.model, max_tokens=self.max_tokens,
                                                  system=brief.text, tools=tools,
                                                  messages=messages)
                    tally.add(resp.usage)
                    content = [_block_param(b) for b in resp.content]
                    record("response", turn=turn, stop_reason=resp.stop_reason, content=content,
                           usage=resp.usage.model_dump() if hasattr(resp.usage, "model_dump")
                           else resp.usage)
                    messages.append({"role": "assistant", "content": content})
                    uses = [b for b in resp.content if b.type == "tool_use"]
                    if not uses:
                        messages.append({"role": "user", "content": NUDGE})
                        continue
                    results = []
                    for u in uses:
                        try:
                            text, err = bench.call(u.name, u.input), False
                        except ToolError as e:
                            text, err = str(e), True
                        except Exception as e:  # a tool bug must not end the attempt
                            text, err = f"{u.name} failed: {type(e).__name__}: {e}", True
                        record("tool", turn=turn, name=u.name, input=u.input, is_error=err,
                               result=text[-4000:])
                        results.append({"type": "tool_result", "tool_use_id": u.id,
                                        "content": text, "is_error": err})
                    if bench.outcome is not None:
                        return done(bench.outcome)
                    messages.append({"role": "user", "content": results})
                return done(Proposal(kind="failed", reason=f"no finish within agent.max_turns="
                                                           f"{self.max_turns} turns"))
            except Exception as e:  # API errors, bad responses: the attempt fails, with its tally
                return done(Proposal(kind="failed", reason=f"Messages API loop stopped: "
                                                           f"{type(e).__name__}: {e}"))
