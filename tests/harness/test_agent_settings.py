"""Every setting a backend reads, written in a kern.yaml and taken the loop's way to the agent
process: kern.yaml resolved, its ``agent`` section handed over as ``settings.json`` and read back
by ``python -m harness.agents.run`` (harness/orchestrator.py starts agents so). The anthropic
backend talks to a local Messages API; the command backend runs the Claude Code CLI in print
mode (``claude -p``) against it, with its key and endpoint passed by ``agent.pass_env``."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.agents import claude_code
from harness.agents import run as agent_run
from harness.agents.base import Brief, Proposal, parse_proposal
from harness.agents.registry import agent_settings, make_agent
from harness.settings import Resolved, load
from harness.cli.show import transcript_summary
from tests.harness.messages_api import (MessagesAPI, Script, any_claude_cli, claude_code_session,
                                        text, tool_use)
from tests.harness.test_agents import (EDITABLE, PROTECTED, FakeSDK, changed_files,
                                       commits_since_main, repo)  # noqa: F401 - repo is a fixture

ROOT = Path(__file__).resolve().parents[2]
MODEL = "claude-sonnet-4-5"


def kern_yaml(tmp_path: Path, agent: dict) -> Resolved:
    """The repository's kern.yaml with ``agent`` as its agent section, loaded and resolved."""
    cfg = yaml.safe_load((ROOT / "kern.yaml").read_text())
    cfg["agent"] = agent
    path = tmp_path / "kern.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return load(path).resolve(False)


def run_like_the_loop(cfg: Resolved, brief: Brief, worktree: Path, tmp_path: Path,
                      env: dict) -> Proposal:
    """The agent process as the loop starts it, with ``env`` as its environment."""
    d = tmp_path / "attempt"
    d.mkdir(exist_ok=True)
    (d / "brief.json").write_text(json.dumps(brief.as_dict()))
    (d / "settings.json").write_text(json.dumps({"agent": cfg.agent.options(),
                                                 "context": {"index": 0, "seed": brief.attempt,
                                                             "root": str(worktree)}}))
    r = subprocess.run([sys.executable, "-m", "harness.agents.run", "--brief", str(d / "brief.json"),
                        "--worktree", str(worktree), "--settings", str(d / "settings.json"),
                        "--out", str(d / "proposal.json")], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={**env, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    return parse_proposal((d / "proposal.json").read_text())


def doc_snippets() -> list[dict]:
    """The kern.yaml snippets of docs/agents.md, parsed, in order."""
    text = (ROOT / "docs/agents.md").read_text()
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def base_env(tmp_path: Path) -> dict:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
            "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}


def test_anthropic_backend_reads_every_setting_from_kern_yaml(repo, tmp_path):
    """model, max_tokens, base_url, max_retries, prices and quick_timeout_s reach the Messages
    API loop; max_budget_usd ends an attempt once its cost reaches it; max_turns caps the calls."""
    quick = f"{sys.executable} -c \"import time; time.sleep(30)\""
    session = Script([[tool_use(1, "run_quick_test")],
                      [tool_use(2, "finish", kind="declined", message="split K", estimate_ms=-0.2)]],
                     tools=("finish",), usage=lambda i: {"input_tokens": 1000, "output_tokens": 100})
    with MessagesAPI(session) as api:
        cfg = kern_yaml(tmp_path, {
            "backend": "anthropic", "model": "claude-test-1", "max_tokens": 321, "max_turns": 5,
            "base_url": api.url, "max_retries": 0, "quick_timeout_s": 1,
            "prices": {"claude-test": [2.0, 10.0]}, "max_budget_usd": 1.0})
        env = {**base_env(tmp_path), "ANTHROPIC_API_KEY": "sk-ant-dummy"}
        p = run_like_the_loop(cfg, Brief(attempt=1, target="moe.experts", text="BRIEF", quick_test=quick,
                                         editable=EDITABLE, protected=PROTECTED), repo, tmp_path, env)
        reqs = api.session_requests()
    assert (p.kind, p.message, p.estimate_ms) == ("declined", "split K", -0.2), p
    assert [(r["model"], r["max_tokens"]) for r in reqs] == [("claude-test-1", 321)] * 2
    quick_result = reqs[1]["messages"][-1]["content"][0]["content"]
    assert "timed out after 1s" in quick_result, quick_result
    assert p.cost_usd == pytest.approx((2000 * 2.0 + 200 * 10.0) / 1e6)

    # a cap below one reply's cost: the second call is never made
    with MessagesAPI(Script([[tool_use(1, "list_files", glob="*")]] * 3, tools=("finish",),
                            usage=lambda i: {"input_tokens": 1000, "output_tokens": 100})) as api:
        cfg = kern_yaml(tmp_path, {"backend": "anthropic", "model": "claude-test-1", "base_url": api.url,
                                   "max_retries": 0, "prices": {"claude-test": [2.0, 10.0]},
                                   "max_budget_usd": 0.001})
        p = run_like_the_loop(cfg, Brief(attempt=2, target="moe.experts", text="BRIEF"), repo, tmp_path, env)
        assert len(api.session_requests()) == 1
    assert p.kind == "failed" and "cost cap reached: $0.0030 of agent.max_budget_usd $0.001" in p.reason, p

    with MessagesAPI(Script([[text("thinking")]] * 2, tools=("finish",))) as api:
        cfg = kern_yaml(tmp_path, {"backend": "anthropic", "base_url": api.url, "max_retries": 0,
                                   "max_turns": 2})
        p = run_like_the_loop(cfg, Brief(attempt=3, target="moe.experts", text="BRIEF"), repo, tmp_path, env)
    assert p.kind == "failed" and "agent.max_turns=2" in p.reason, p


def test_claude_code_backend_reads_model_turns_and_cost_cap_from_kern_yaml(tmp_path, repo):
    cfg = kern_yaml(tmp_path, {"backend": "claude-code", "model": "claude-opus-4-5", "max_turns": 9,
                               "max_budget_usd": 0.75})
    (tmp_path / "settings.json").write_text(json.dumps({"agent": cfg.agent.options()}))
    settings, _ = agent_run.load_settings(tmp_path / "settings.json")
    agent = make_agent(agent_settings(settings))
    opts = claude_code.build_options(FakeSDK, agent.settings, Brief(attempt=1, target="t", text="b"),
                                     repo)
    assert (opts.model, opts.max_turns, opts.max_budget_usd) == ("claude-opus-4-5", 9, 0.75)
    cfg = kern_yaml(tmp_path, {"backend": "claude-code", "max_budget_usd": None})
    opts = claude_code.build_options(FakeSDK, cfg.agent, Brief(attempt=1, target="t", text="b"), repo)
    assert not hasattr(opts, "max_budget_usd") and (opts.model, opts.max_turns) == (MODEL, 40)


def test_command_backend_runs_claude_print_mode_with_pass_env_from_kern_yaml(repo, tmp_path):
    """`claude -p` as kern.yaml's agent.command: the brief on its stdin; the key and endpoint
    reach it only because agent.pass_env names them; a variable it does not name never does;
    agent.max_budget_usd reaches its command line as KERN_MAX_BUDGET_USD; its stream-json
    output is the transcript kern show reads."""
    cli, missing = any_claude_cli()
    if cli is None:
        pytest.fail(missing)
    tunables = "kernels/k31/moe/tunables.py"
    old, new = '"moe.experts.block_m": (16, (16, 32, 64)),', '"moe.experts.block_m": (32, (16, 32, 64)),'
    quick = (f"{sys.executable} -c \"import os; print('quick ok', os.environ.get('NOT_PASSED'), "
             f"os.environ.get('ANTHROPIC_API_KEY'))\"")
    brief = Brief(attempt=1, target="moe.experts", text=f"BRIEF: make moe.experts faster.\n"
                  f"- Quick test: `{quick}`\n", quick_test=quick, editable=EDITABLE, protected=PROTECTED)
    # docs/agents.md's snippet, as written there but for where the CLI is and the local
    # endpoint's variables (no update checks or telemetry: nothing outside answers)
    (doc,) = [a for a in doc_snippets() if "claude -p" in (a.get("agent") or {}).get("command", "")]
    agent = doc["agent"]
    assert agent["command"].startswith("claude -p ") and agent["pass_env"] == ["ANTHROPIC_API_KEY"]
    with MessagesAPI(claude_code_session(tunables, old, new, "moe: block_m 32")) as api:
        cfg = kern_yaml(tmp_path, {
            **agent, "max_budget_usd": 2.5, "command": cli + agent["command"].removeprefix("claude"),
            "pass_env": [*agent["pass_env"], "ANTHROPIC_BASE_URL",
                         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_AUTOUPDATER"]})
        env = {**base_env(tmp_path), "ANTHROPIC_API_KEY": "sk-ant-dummy-passed",
               "ANTHROPIC_BASE_URL": api.url, "NOT_PASSED": "leaked",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
        p = run_like_the_loop(cfg, brief, repo, tmp_path, env)
        posts = [r for r in api.requests if r["method"] == "POST"]
        results = api.tool_results()
    log = Path(p.transcript).read_text() if p.transcript else ""
    assert not api.errors, api.errors
    assert p.kind == "commit" and p.message == "moe: block_m 32", (p, log[-2000:])
    assert commits_since_main(repo) == ["moe: block_m 32"] and changed_files(repo) == [tunables]
    # the key named in pass_env reached the CLI (it sent it), NOT_PASSED did not reach its tools
    assert posts and {r["headers"].get("x-api-key") for r in posts} == {"sk-ant-dummy-passed"}
    quick_out = json.dumps([r for r in results.values() if "quick ok" in json.dumps(r)])
    assert "quick ok None sk-ant-dummy-passed" in quick_out, quick_out
    result = json.loads(log.strip().splitlines()[-1])
    assert result["type"] == "result" and p.cost_usd == result["total_cost_usd"] > 0
    assert (p.tokens_in, p.tokens_out) == api.all_tokens()
    # kern show's reading of the CLI's stream: its turns and tool calls, in order
    summary = transcript_summary(log.splitlines())
    assert (summary["format"], summary["turns"], summary["cost_usd"]) == \
        ("claude -p", result["num_turns"], p.cost_usd)
    assert [c["call"].split()[0] for c in summary["tool_calls"]] == ["Read", "Edit", "Bash", "Bash"]
    assert summary["tool_calls"][0]["call"].endswith(tunables) and not any(c["error"] for c in summary["tool_calls"])


def test_tuner_and_replay_backends_read_kern_yaml(repo, tmp_path):
    brief = Brief(attempt=1, target="moe.experts", text="BRIEF", editable=EDITABLE, protected=PROTECTED)
    cfg = kern_yaml(tmp_path, {"backend": "tuner", "tunables": ["moe.experts.num_warps"]})
    p = run_like_the_loop(cfg, brief, repo, tmp_path, base_env(tmp_path))
    assert p.kind == "commit" and p.message.startswith("tune: moe.experts.num_warps "), p
    patches = repo / "patches"  # agent.replay_dir is relative to the repository root
    patches.mkdir()
    (patches / "01-idea.json").write_text(json.dumps({"declined": "fuse FC2", "estimate_ms": -0.4}))
    cfg = kern_yaml(tmp_path, {"backend": "replay", "replay_dir": "patches"})
    p = run_like_the_loop(cfg, brief, repo, tmp_path, base_env(tmp_path))
    assert (p.kind, p.message, p.estimate_ms) == ("declined", "fuse FC2", -0.4), p


def test_every_snippet_of_docs_agents_md_is_a_valid_kern_yaml():
    """Each snippet over the repository's kern.yaml: its sections' keys set (a snippet naming a
    backend stands for the whole agent section), and kern.yaml still loads."""
    from harness.settings import validate

    snippets = doc_snippets()
    assert len(snippets) >= 7
    backends = set()
    for snip in snippets:
        cfg = yaml.safe_load((ROOT / "kern.yaml").read_text())
        for section, keys in snip.items():
            cfg[section] = dict(keys) if section == "agent" and "backend" in keys else {**cfg[section], **keys}
        assert validate(cfg) == [], snip
        backends.add(cfg["agent"]["backend"])
    assert {"claude-code", "anthropic", "command"} <= backends
