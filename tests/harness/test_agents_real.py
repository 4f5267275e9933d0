"""The agent backends as users run them: the real ``claude-agent-sdk`` and the Claude Code CLI
(npm ``@anthropic-ai/claude-code``), pointed by ANTHROPIC_BASE_URL and a dummy key at a local
Messages API that plays a scripted session (``tests/harness/messages_api.py``): read a kernel
file, edit it, run the quick test, ``git commit``. Nothing here stands in for the SDK or the
CLI; where one is not installed the test is skipped and says what is missing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.agents.anthropic_agent import PRICES_PER_MTOK
from harness.agents.base import Brief
from harness.agents.registry import agent_settings, make_agent
from harness.cli.show import transcript_summary
from tests.harness.messages_api import (MessagesAPI, agent_sdk, claude_cli, claude_code_session,
                                        declined_session, tool_id)
from tests.harness.test_agents import (EDITABLE, PROTECTED, changed_files, commits_since_main,
                                       repo, sh)  # noqa: F401 - repo is a fixture

# subprocesses (the CLI, git) over temporary repositories
pytestmark = pytest.mark.slow
MODEL = "claude-sonnet-4-5"
TUNABLES = "kernels/k31/moe/tunables.py"
OLD = '"moe.experts.block_m": (16, (16, 32, 64)),'
NEW = '"moe.experts.block_m": (32, (16, 32, 64)),'
QUICK = f"{sys.executable} -c \"print('quick ok')\""


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    """What a user sets for a local endpoint: ANTHROPIC_BASE_URL (set per test) and a key. HOME
    is a fresh folder, so the CLI reads and writes no real user's settings; its non-essential
    traffic (update checks, telemetry) is off, as nothing outside this machine answers."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-dummy-for-the-local-server")
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    monkeypatch.setenv("DISABLE_AUTOUPDATER", "1")
    for name in ("ANTHROPIC_AUTH_TOKEN", "CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT",
                 "ANTHROPIC_MODEL", "CLAUDE_CONFIG_DIR"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def kernel_brief(**kw) -> Brief:
    base = dict(attempt=1, target="moe.experts", editable=EDITABLE, protected=PROTECTED,
                text=f"BRIEF: make moe.experts faster.\n- Quick test: `{QUICK}`\n",
                quick_test=QUICK)
    base.update(kw)
    return Brief(**base)


def priced(tokens_in: int, tokens_out: int) -> float:
    pin, pout = PRICES_PER_MTOK["claude-sonnet-4"]
    return (tokens_in * pin + tokens_out * pout) / 1e6


def check_requests(api: MessagesAPI) -> None:
    """What the real client sent: the dummy key, the model asked for, streamed."""
    assert not api.errors, api.errors
    posts = [r for r in api.requests if r["method"] == "POST"]
    assert posts and all(r["path"].split("?")[0] == "/v1/messages" for r in posts), \
        [r["path"] for r in posts]
    assert {r["headers"].get("x-api-key") for r in posts} == {"sk-ant-dummy-for-the-local-server"}
    session = api.session_requests()
    assert session and all(b["model"] == MODEL and b["stream"] is True for b in session)


def test_claude_code_backend_through_the_sdk_and_cli(repo, cli_env):
    """One attempt of the claude-code backend: the SDK starts the CLI it ships, the CLI's own
    Read, Edit and Bash tools do the work, the backend's permission hook refuses the protected
    file, the commit is the attempt's, and tokens and cost are what the CLI counted of the
    server's replies."""
    sdk, missing = agent_sdk()
    if sdk is None:
        pytest.skip(missing)
    script = claude_code_session(TUNABLES, OLD, NEW, "moe: block_m 32",
                                 refused=("kernels/k31/reference.py", "REFERENCE = 1"))
    with MessagesAPI(script) as api:
        cli_env.setenv("ANTHROPIC_BASE_URL", api.url)
        agent = make_agent(agent_settings({"backend": "claude-code", "model": MODEL, "max_turns": 12}))
        p = agent.propose(kernel_brief(), repo)
    check_requests(api)
    assert p.kind == "commit" and p.message == "moe: block_m 32", (p, api.errors)
    assert commits_since_main(repo) == ["moe: block_m 32"]
    assert changed_files(repo) == [TUNABLES]
    assert NEW in (repo / TUNABLES).read_text()
    assert (repo / "kernels/k31/reference.py").read_text() == "REFERENCE = 1\n"
    assert sh(repo, "log", "-1", "--format=%an").strip() == "kern-loop claude-code"
    results = api.tool_results()
    refused = results[tool_id(1)]
    assert refused.get("is_error") is True and "protected" in json.dumps(refused["content"])
    assert "quick ok" in json.dumps(results[tool_id(3)]["content"])  # the quick test's output
    # tokens: every reply the server sent (the session's and the CLI's own side requests);
    # cost: what the CLI priced them at, the same as this project's price of the model
    assert p.tokens_in > 0 and (p.tokens_in, p.tokens_out) == api.all_tokens()
    transcript = Path(p.transcript)
    assert transcript.parent == repo.parent
    result = [json.loads(x) for x in transcript.read_text().splitlines()][-1]
    assert result["type"] == "ResultMessage" and result["subtype"] == "success"
    assert p.cost_usd == result["total_cost_usd"] > 0
    assert p.cost_usd == pytest.approx(priced(p.tokens_in, p.tokens_out), rel=1e-9)
    # kern show's reading of the SDK transcript: the session's turns, its tool calls in order,
    # the protected edit among them refused
    summary = transcript_summary(transcript.read_text().splitlines())
    assert (summary["format"], summary["turns"], summary["cost_usd"]) == \
        ("claude-code", result["num_turns"], p.cost_usd)
    assert [(c["call"].split()[0], c["error"]) for c in summary["tool_calls"]] == \
        [("Read", False), ("Read", False), ("Edit", True), ("Edit", False), ("Bash", False), ("Bash", False)]


def command_agent(cli: str, output: str):
    return make_agent(agent_settings({
        "backend": "command", "timeout_s": 120,
        "command": f"{cli} -p --model {MODEL} --allowedTools Read,Edit,Bash --output-format {output}",
        "pass_env": ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
                     "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_AUTOUPDATER"]}))


def test_command_backend_runs_claude_print_mode(repo, cli_env):
    """The command backend running the npm CLI in print mode: the brief on stdin, the API key
    and endpoint passed by name (agent.pass_env), the CLI's commit taken as the attempt's, and
    with --output-format json the CLI's tokens and cost recorded; then a session that declines,
    in text output, ends as declined with its estimate."""
    cli, missing = claude_cli()
    if cli is None:
        pytest.skip(missing)
    version = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0, version.stderr
    script = claude_code_session(TUNABLES, OLD, NEW, "moe: block_m 32 (print mode)")
    with MessagesAPI(script) as api:
        cli_env.setenv("ANTHROPIC_BASE_URL", api.url)
        p = command_agent(cli, "json").propose(kernel_brief(), repo)
    check_requests(api)
    log = Path(p.transcript).read_text()
    assert p.kind == "commit" and p.message == "moe: block_m 32 (print mode)", (p, log)
    assert commits_since_main(repo) == ["moe: block_m 32 (print mode)"]
    assert changed_files(repo) == [TUNABLES]
    assert sh(repo, "log", "-1", "--format=%an").strip() == "kern-loop command"
    # the brief reached the CLI on stdin; its result object closes the log
    first = api.session_requests()[0]
    assert "BRIEF: make moe.experts faster." in json.dumps(first["messages"])
    result = json.loads(log.strip().splitlines()[-1])
    assert result["type"] == "result" and result["result"] == "Committed: moe: block_m 32 (print mode)"
    assert (p.tokens_in, p.tokens_out) == api.all_tokens()
    assert p.cost_usd == result["total_cost_usd"] == pytest.approx(
        priced(p.tokens_in, p.tokens_out), rel=1e-9)

    sh(repo, "reset", "-q", "--hard", "main")
    with MessagesAPI(declined_session(TUNABLES, "block_m 64 spills registers", 0.3)) as api:
        cli_env.setenv("ANTHROPIC_BASE_URL", api.url)
        p = command_agent(cli, "text").propose(kernel_brief(attempt=2), repo)
    check_requests(api)
    assert (p.kind, p.message, p.estimate_ms) == ("declined", "block_m 64 spills registers", 0.3), p
    assert commits_since_main(repo) == [] and (p.tokens_in, p.cost_usd) == (0, 0.0)


def test_claude_code_backend_declines_through_the_sdk(repo, cli_env):
    """A session whose last line is the declined JSON ends as declined, with its estimate."""
    sdk, missing = agent_sdk()
    if sdk is None:
        pytest.skip(missing)
    with MessagesAPI(declined_session(TUNABLES, "block_m 64 spills registers", 0.3)) as api:
        cli_env.setenv("ANTHROPIC_BASE_URL", api.url)
        p = make_agent(agent_settings({"backend": "claude-code", "model": MODEL})).propose(kernel_brief(), repo)
    check_requests(api)
    assert (p.kind, p.message, p.estimate_ms) == ("declined", "block_m 64 spills registers", 0.3), p
    assert commits_since_main(repo) == []
    assert (p.tokens_in, p.tokens_out) == api.all_tokens() and p.cost_usd > 0


# ---- one loop tick with the claude-code backend ----------------------------------------------

# the smallest judgment (one tap row, one bucket, one round of one replay): the tick proves the
# backend's attempt reaches the gates and the ledger, not the gates' statistics (tests/gates)
TICK = {"profiles.cpu.test_rows": [1], "profiles.cpu.buckets": [2], "profiles.cpu.weights": [1],
        "profiles.cpu.rounds": 1, "profiles.cpu.replays": 1, "loop.concurrency": 1,
        "agent.backend": "claude-code", "agent.model": MODEL, "agent.max_turns": 12}
KDA_CORE = "kernels/k31/kda/core.py"
DECAY = "s = s * decay[:, None, :]"


def test_loop_tick_with_claude_code_judges_and_records_tokens_and_cost(tmp_path, cli_env):
    """``kern loop``'s tick spawns the claude-code backend in its own process (the SDK, the
    CLI), the CLI commits a kernel edit that drops KDA's decay, the gates judge it (abandoned:
    accuracy) and the ledger row carries the CLI's tokens and cost."""
    sdk, missing = agent_sdk()
    if sdk is None:
        pytest.skip(missing)
    from harness import ledger as L
    from harness.orchestrator import Orchestrator
    from tests.gates.candidates import context, make_repo

    repo = make_repo(tmp_path, TICK)
    # the scripted model runs the brief's quick test (`python -m pytest ...`) with Bash: the
    # interpreter this suite runs on comes first on PATH
    cli_env.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    script = claude_code_session(KDA_CORE, DECAY, "s = s", "kda.core: no decay")
    with MessagesAPI(script) as api:
        cli_env.setenv("ANTHROPIC_BASE_URL", api.url)
        ctx, settings = context(repo)
        orch = Orchestrator(ctx)
        first = orch.tick(wait_for_agents=180)
        second = orch.tick(spawn=False)
    check_requests(api)
    (a,) = ctx.ledger.attempts()
    log = (repo / "runs" / "attempts" / str(a.number) / "agent.log")
    assert first.spawned == [(a.number, a.target)], (first, second)
    assert (a.backend, a.title) == ("claude-code", "kda.core: no decay"), \
        (a.state, a.reason, log.read_text()[-2000:] if log.exists() else None)
    assert (a.state, a.reason) == (L.ABANDONED, "accuracy"), (a.state, a.reason, a.gate)
    assert any("kda.core" in r for r in a.gate.accuracy.reasons), a.gate
    assert a.commit_sha and ctx.repo.main_sha() == a.base_sha  # judged, not merged
    tokens_in, tokens_out = api.all_tokens()
    assert a.tokens == tokens_in + tokens_out > 0
    assert a.cost_usd == pytest.approx(priced(tokens_in, tokens_out), rel=1e-9)
    assert ctx.ledger.usage()["tokens"] == a.tokens
    # the quick test the brief named ran in the attempt's worktree and its output reached the
    # scripted model (the temporary repository holds no tests/: pytest says so, exit 4)
    brief = json.loads((log.parent / "brief.json").read_text())
    (ran,) = [b["input"]["command"] for s in api.served for b in s["content"]
              if b.get("id") == tool_id(2)]
    assert ran == brief["quick_test"] and ran.startswith("python -m pytest -q tests/"), ran
    quick = json.dumps(api.tool_results()[tool_id(2)]["content"])
    assert "Exit code 4" in quick and "file or directory not found: tests/" in quick, quick
