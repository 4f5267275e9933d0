"""The agent backends on temporary git repositories (CPU, no network: the Messages API is a
local HTTP server playing a script, tests/harness/messages_api.py; the real SDK and CLI runs
are in test_agents_real.py)."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

# kern.yaml's model name draws the SDK's deprecation notice; irrelevant to what is tested here
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

from harness.agents import claude_code, run as agent_run
from harness.agents.base import Brief, Proposal
from harness.agents.common import AgentConfigError
from harness.agents.registry import agent_settings, make_agent
from harness.settings import agent_section
from harness.agents.rules import allowed_edit, edit_check
from harness.agents.tuner import (apply_change, candidates, choose_change,
                                  format_tried, load_tree, parse_tried, parse_tunables)
from tests.harness.messages_api import MessagesAPI, Script

MOE = '''"""MoE knobs (tiny test copy)."""

TUNABLES = {
    # moe.experts: rows per block
    "moe.experts.block_m": (16, (16, 32, 64)),   # keep this comment
    "moe.experts.num_warps": (4, (2, 4, 8)),
    "moe.router.num_warps": (4, (1, 2, 4, 8)),
}
'''
KDA = '''TUNABLES = {
    "kda.core.split_v": (1, (1, 2)),
    "kda.core.mode": ("fused", ("fused", "split")),
}
'''
EDITABLE = ["kernels/k31/**"]
PROTECTED = ["kernels/k31/reference.py", "kernels/k31/*/roofline.py", "tests/**", "kern.yaml"]


def sh(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    """A main branch with two tiny tunables files and a protected reference, plus a worktree
    on attempt/1 (as the orchestrator makes them), returned as the worktree."""
    root = tmp_path / "repo"
    (root / "kernels/k31/moe").mkdir(parents=True)
    (root / "kernels/k31/kda").mkdir(parents=True)
    (root / "kernels/k31/moe/tunables.py").write_text(MOE)
    (root / "kernels/k31/kda/tunables.py").write_text(KDA)
    (root / "kernels/k31/reference.py").write_text("REFERENCE = 1\n")
    sh(root, "init", "-q", "-b", "main")
    sh(root, "config", "user.name", "test")
    sh(root, "config", "user.email", "test@localhost")
    sh(root, "add", "-A")
    sh(root, "commit", "-q", "-m", "main")
    wt = tmp_path / "worktrees" / "attempt-1"
    sh(root, "worktree", "add", "-q", "-b", "attempt/1", str(wt), "main")
    return wt


def brief(**kw) -> Brief:
    base = dict(attempt=1, target="moe.experts", text="BRIEF: make moe.experts faster",
                editable=EDITABLE, protected=PROTECTED)
    base.update(kw)
    return Brief(**base)


def commits_since_main(wt) -> list[str]:
    return sh(wt, "log", "--format=%s", "main..HEAD").splitlines()


def changed_files(wt) -> list[str]:
    return sh(wt, "diff", "--name-only", "main..HEAD").split()


# ---- rules --------------------------------------------------------------------------------

@pytest.mark.parametrize("path,ok,word", [
    ("kernels/k31/moe/experts.py", True, "editable"),
    ("kernels/k31/reference.py", False, "protected"),
    ("kernels/k31/mla/roofline.py", False, "protected"),
    ("kernels/k31/moe/../reference.py", False, "protected"),
    ("gates/tap.py", False, "outside the editable"),
    ("../elsewhere.py", False, "outside the worktree"),
    ("/etc/passwd", False, "outside the worktree"),
    ("kernels/k31/.git/config", False, ".git"),
])
def test_allowed_edit(path, ok, word):
    got, why = allowed_edit(path, EDITABLE, PROTECTED)
    assert got is ok and word in why


def test_edit_check_follows_symlinks(repo, tmp_path):
    (tmp_path / "outside.py").write_text("x = 1\n")
    (repo / "kernels/k31/moe/escape.py").symlink_to(tmp_path / "outside.py")
    (repo / "kernels/k31/moe/ref.py").symlink_to(repo / "kernels/k31/reference.py")
    real, why = edit_check(repo, "kernels/k31/moe/escape.py", EDITABLE, PROTECTED)
    assert real is None and "outside the worktree" in why
    real, why = edit_check(repo, "kernels/k31/moe/ref.py", EDITABLE, PROTECTED)
    assert real is None and "protected" in why
    real, why = edit_check(repo, str(repo / "kernels/k31/moe/new.py"), EDITABLE, PROTECTED)
    assert real == (repo / "kernels/k31/moe/new.py").resolve() and why is None


# ---- tuner: the pure decision -------------------------------------------------------------

def test_parse_tried_format():
    lines = ["tunable moe.experts.block_m=32: abandoned: slower (+0.21)",
             "- tunable kda.core.mode='split': merged",
             "#7 tunable kda.core.split_v=2:",
             "tunable moe.router.num_warps=fused: crashed",
             "moe.experts: rewrote the FC1 loop: abandoned",  # another backend's line
             format_tried("moe.experts.num_warps", 8, "running")]
    assert parse_tried(lines) == {("moe.experts.block_m", "32"), ("kda.core.mode", "'split'"),
                                  ("kda.core.split_v", "2"), ("moe.router.num_warps", "'fused'"),
                                  ("moe.experts.num_warps", "8")}


TABLE = {n: (t.value, t.choices) for n, t in parse_tunables(MOE + KDA.replace(
    "TUNABLES", "OTHER"), "x").items()}


def test_choose_change_prefers_target_op_then_family_and_neighbours():
    order = candidates(TABLE, [], "moe.experts", seed=0)
    names = [c.name for c in order]
    assert set(names[:4]) == {"moe.experts.block_m", "moe.experts.num_warps"}
    assert names[4:] == ["moe.router.num_warps"] * 3
    # neighbours of the current value first: block_m 16 -> 32 before 64, num_warps 4 -> 2|8
    block = [c.new for c in order if c.name == "moe.experts.block_m"]
    assert block == [32, 64]
    dist1 = {(c.name, c.new) for c in order[:3]}
    assert ("moe.experts.block_m", 64) not in dist1
    router = [c.new for c in order if c.name == "moe.router.num_warps"]
    assert router[0] in (2, 8) and router[-1] == 1  # 4 -> {2, 8} then 1
    assert not any(c.name.startswith("kda.") for c in order)  # never another family


def test_choose_change_nothing_left():
    tried = [format_tried(n, c, "abandoned") for n, (v, cs) in TABLE.items() for c in cs]
    assert choose_change(TABLE, tried, "moe.experts", 3) is None
    assert choose_change(TABLE, [], "dense.qkv", 3) is None  # no tunables for that family


def test_agent_tunables_orders_and_limits_the_moves():
    # the first pattern's tunables before the rest of the tier, whatever the seed; then "*"
    for seed in range(20):
        order = candidates(TABLE, [], "moe.experts", seed, prefer=("moe.experts.num_warps", "*"))
        assert [c.name for c in order[:2]] == ["moe.experts.num_warps"] * 2, seed
        assert {c.name for c in order[2:4]} == {"moe.experts.block_m"}
        assert [c.name for c in order[4:]] == ["moe.router.num_warps"] * 3  # the tier still rules
    # a tunable matching no pattern is never proposed
    only = candidates(TABLE, [], "moe.experts", 0, prefer=("*.block_m",))
    assert [(c.name, c.new) for c in only] == [("moe.experts.block_m", 32), ("moe.experts.block_m", 64)]
    # the default ("*") is the order without patterns
    assert candidates(TABLE, [], "moe", 4) == candidates(TABLE, [], "moe", 4, prefer=("*",))


def test_agent_tunables_is_checked_and_named_when_nothing_is_left(repo):
    for bad in ("moe.*", [], [""], [3]):
        with pytest.raises(AgentConfigError) as e:
            make_agent(agent_settings({"backend": "tuner", "tunables": bad}))
        assert "agent.tunables" in str(e.value) and repr(bad) in str(e.value)
    agent = make_agent(agent_settings({"backend": "tuner", "tunables": ["lm_head.*"]}), seed=0)
    p = agent.propose(brief(), repo)
    assert p.kind == "declined" and "agent.tunables ['lm_head.*']" in p.message, p


name_st = st.sampled_from(["moe.experts.a", "moe.experts.b", "moe.router.c", "kda.core.d",
                           "kda.conv.e"])


@st.composite
def tables(draw):
    names = draw(st.lists(name_st, min_size=1, max_size=5, unique=True))
    out = {}
    for n in names:
        choices = tuple(draw(st.lists(st.sampled_from([1, 2, 4, 8, 16, 32, "x", "y"]),
                                      min_size=1, max_size=6, unique=True)))
        out[n] = (draw(st.sampled_from(choices)), choices)
    return out


def oracle_rank(table, name, choice, target):
    """(tier, distance) of a move, from the rules as stated, or None if off-target."""
    fam = target.split(".")[0]
    if not target or name == target or name.startswith(target + "."):
        tier = 0
    elif name.startswith(fam + "."):
        tier = 1
    else:
        return None
    value, choices = table[name]
    return tier, abs(choices.index(choice) - choices.index(value))


@hsettings(max_examples=300, deadline=None)
@given(table=tables(), data=st.data(), seed=st.integers(0, 2**31),
       target=st.sampled_from(["moe.experts", "moe", "kda.core", "moe.router.c", ""]))
def test_choose_change_properties(table, data, seed, target):
    pairs = [(n, c) for n, (_, cs) in table.items() for c in cs]
    tried_pairs = set(data.draw(st.lists(st.sampled_from(pairs), max_size=len(pairs))))
    tried = [format_tried(n, c, "abandoned: slower (+0.1)") for n, c in sorted(tried_pairs, key=str)]
    got = choose_change(table, tried, target, seed)
    assert got == choose_change(table, list(reversed(tried)), target, seed)  # deterministic
    open_moves = {(n, c): oracle_rank(table, n, c, target) for n, c in pairs
                  if c != table[n][0] and (n, c) not in tried_pairs
                  and oracle_rank(table, n, c, target) is not None}
    if got is None:
        assert open_moves == {}
        return
    value, choices = table[got.name]
    assert got.new in choices and got.new != value and got.old == value  # a declared other choice
    assert (got.name, got.new) not in tried_pairs  # never a tried pair
    # the target op before its family, then the nearest choice of the current value
    assert open_moves[(got.name, got.new)] == min(open_moves.values())


# ---- tuner: the agent on a repository ------------------------------------------------------

def test_tuner_commits_exactly_one_literal_change(repo):
    before = (repo / "kernels/k31/moe/tunables.py").read_text()
    p = make_agent(agent_settings({"backend": "tuner"}), seed=0).propose(brief(), repo)
    assert p.kind == "commit" and p.message.startswith("tune: moe.experts.")
    assert commits_since_main(repo) == [p.message]
    assert changed_files(repo) == ["kernels/k31/moe/tunables.py"]
    after = (repo / "kernels/k31/moe/tunables.py").read_text()
    diff = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert len(diff) == 1 and len(before.splitlines()) == len(after.splitlines())
    name, old, _, new = p.message.split()[1:]
    assert diff[0][1] == diff[0][0].replace(f"({old}, (", f"({new}, (", 1)
    assert load_tree(repo)[name].value == int(new)
    assert "# keep this comment" in after
    assert sh(repo, "status", "--porcelain") == ""


def test_tuner_follows_tried_and_declines_when_exhausted(repo):
    tried, seen = [], set()
    agent = make_agent(agent_settings({"backend": "tuner"}), seed=5)
    for i in range(20):
        sh(repo, "reset", "-q", "--hard", "main")
        p = agent.propose(brief(attempt=i + 1, tried=tried), repo)
        if p.kind == "declined":
            break
        _, name, old, _, new = p.message.split()
        assert (name, new) not in seen
        seen.add((name, new))
        tried.append(format_tried(name, int(new), "abandoned: slower (+0.02)"))
    assert p == Proposal(kind="declined", message="nothing left to tune for moe.experts",
                         estimate_ms=0)
    # 2 + 2 moves on moe.experts.*, then 3 on the rest of the moe family
    assert len(seen) == 7


def test_tuner_keeps_string_quotes(repo):
    src = (repo / "kernels/k31/kda/tunables.py").read_text()
    t = parse_tunables(src, "kda")["kda.core.mode"]
    out = apply_change(src, t, "split")
    assert out == src.replace('("fused", ("fused"', '("split", ("fused"')


# ---- replay --------------------------------------------------------------------------------

def make_patches(repo, folder: Path) -> None:
    """01: a plain diff with a subject line; 02: a format-patch mbox; 03: a declined idea."""
    folder.mkdir()
    sh(repo, "checkout", "-q", "-b", "scratch")
    (repo / "kernels/k31/moe/a.py").write_text("A = 1\n")
    sh(repo, "add", "-A")
    diff = sh(repo, "diff", "--cached")
    (folder / "01-a.patch").write_text("moe: add a\n\n" + diff)
    sh(repo, "reset", "-q", "--hard")
    (repo / "kernels/k31/moe/b.py").write_text("B = 2\n")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", "moe: add b")
    (folder / "02-b.patch").write_text(sh(repo, "format-patch", "-1", "--stdout"))
    (folder / "03-idea.json").write_text(json.dumps({"declined": "fuse combine into FC2",
                                                     "estimate_ms": -0.4}))
    (folder / "README.txt").write_text("not a patch")
    sh(repo, "checkout", "-q", "attempt/1")


def test_replay_applies_in_order_then_declines(repo, tmp_path):
    folder = tmp_path / "patches"
    make_patches(repo, folder)
    out = []
    for i in range(4):
        sh(repo, "reset", "-q", "--hard", "main")
        agent = make_agent(agent_settings({"backend": "replay", "replay_dir": "patches"}), root=tmp_path,
                           index=i, seed=0, tree="kernels/k31")
        p = agent.propose(brief(attempt=10 + i), repo)
        out.append((p.kind, p.message, p.estimate_ms,
                    commits_since_main(repo), changed_files(repo)))
    assert out[0] == ("commit", "moe: add a", None, ["moe: add a"], ["kernels/k31/moe/a.py"])
    assert out[1] == ("commit", "moe: add b", None, ["moe: add b"], ["kernels/k31/moe/b.py"])
    assert out[2] == ("declined", "fuse combine into FC2", -0.4, [], [])
    assert out[3][0] == "declined" and out[3][1].startswith("nothing left to replay")


def test_a_stacked_patch_applies_itself_on_its_predecessor_else_its_onto_main_variant(repo, tmp_path):
    """02 was written on 01; onto-main/02 is the same idea on main alone: each main gets the
    one that applies, and a main that takes neither gets a failure naming both; a variant
    written onto main with another queued patch merged (onto-03/) serves that main."""
    folder = tmp_path / "patches"
    folder.mkdir()
    (folder / "onto-main").mkdir()
    sh(repo, "checkout", "-q", "-b", "scratch", "main")
    (repo / "kernels/k31/moe/a.py").write_text("A = 1\n")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", "moe: add a")
    (folder / "01-a.patch").write_text(sh(repo, "format-patch", "-1", "--stdout"))
    (repo / "kernels/k31/moe/a.py").write_text("A = 1\nB = 2\n")
    sh(repo, "commit", "-q", "-am", "moe: b beside a")
    (folder / "02-b.patch").write_text(sh(repo, "format-patch", "-1", "--stdout"))
    sh(repo, "checkout", "-q", "-b", "alone", "main")
    (repo / "kernels/k31/moe/a.py").write_text("B = 2\n")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", "moe: b alone")
    (folder / "onto-main" / "02-b.patch").write_text(sh(repo, "format-patch", "-1", "--stdout"))

    def propose_02(base: str):
        sh(repo, "checkout", "-q", "attempt/1")
        sh(repo, "reset", "-q", "--hard", base)
        agent = make_agent(agent_settings({"backend": "replay", "replay_dir": "patches"}),
                           root=tmp_path, index=1, seed=0, tree="kernels/k31")
        return agent.propose(brief(attempt=12), repo)

    on_01 = propose_02("scratch~1")  # main with 01 merged
    assert (on_01.kind, on_01.message) == ("commit", "moe: b beside a")
    assert (repo / "kernels/k31/moe/a.py").read_text() == "A = 1\nB = 2\n"
    alone = propose_02("main")  # 01 abandoned
    assert (alone.kind, alone.message) == ("commit", "moe: b alone")
    assert commits_since_main(repo) == ["moe: b alone"]
    assert not (repo / ".git" / "rebase-apply").exists()  # the first try's git am was aborted
    (repo / "kernels/k31/moe/a.py").write_text("C = 3\n")  # a main that takes neither
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", "moe: c")
    neither = propose_02("HEAD")
    assert neither.kind == "failed"
    assert "replay 02-b.patch does not apply: 02-b.patch: " in neither.reason
    assert "; onto-main/02-b.patch: " in neither.reason
    assert (repo / "kernels/k31/moe/a.py").read_text() == "C = 3\n"
    # that main is main with another queued patch (c) merged: 02's variant written onto it,
    # in onto-<c>/, applies there (tried after the two above)
    on_c = sh(repo, "rev-parse", "HEAD").strip()
    (repo / "kernels/k31/moe/a.py").write_text("C = 3\nB = 2\n")
    sh(repo, "commit", "-q", "-am", "moe: b beside c")
    (folder / "onto-03").mkdir()
    (folder / "onto-03" / "02-b.patch").write_text(sh(repo, "format-patch", "-1", "--stdout"))
    with_c = propose_02(on_c)
    assert (with_c.kind, with_c.message) == ("commit", "moe: b beside c")
    assert (repo / "kernels/k31/moe/a.py").read_text() == "C = 3\nB = 2\n"
    from harness.agents.replay import variants

    assert [str(v.relative_to(folder)) for v in variants(folder / "02-b.patch")] == \
        ["02-b.patch", "onto-main/02-b.patch", "onto-03/02-b.patch"]
    assert [str(v.relative_to(folder)) for v in variants(folder / "01-a.patch")] == ["01-a.patch"]


def test_replay_needs_its_index(tmp_path):
    (tmp_path / "p").mkdir()
    with pytest.raises(AgentConfigError, match="index="):
        make_agent(agent_settings({"backend": "replay", "replay_dir": str(tmp_path / "p")}))


# ---- command -------------------------------------------------------------------------------

AGENT_SCRIPT = r'''
import json, os, subprocess, sys
brief = sys.stdin.read()
open("kernels/k31/moe/seen.txt", "w").write(brief)
print(json.dumps({"env": sorted(os.environ)}))
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "command: note the brief"], check=True)
'''


def test_command_gets_brief_on_stdin_and_no_api_key(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("SOME_ALLOWED", "yes")
    script = tmp_path / "agent.py"
    script.write_text(AGENT_SCRIPT)
    agent = make_agent(agent_settings({"backend": "command", "command": f"{sys.executable} {script}",
                        "pass_env": ["SOME_ALLOWED"]}))
    p = agent.propose(brief(), repo)
    assert p.kind == "commit" and p.message == "command: note the brief"
    assert (repo / "kernels/k31/moe/seen.txt").read_text() == "BRIEF: make moe.experts faster"
    log = Path(p.transcript)
    assert log.parent == repo.parent and log.exists()
    env = json.loads(log.read_text().splitlines()[0])["env"]
    assert "ANTHROPIC_API_KEY" not in env and "SOME_ALLOWED" in env and "PATH" in env
    assert "sk-secret" not in log.read_text()


def test_command_failed_declined_and_timeout(repo):
    p = make_agent(agent_settings({"backend": "command", "command": "echo thinking; echo oops >&2; exit 3"})).propose(brief(), repo)
    assert p.kind == "failed" and "exited 3" in p.reason and "oops" in p.reason
    p = make_agent(agent_settings({"backend": "command", "command": """echo '{"declined": "split K", "estimate_ms": -0.2}'"""})
                     ).propose(brief(), repo)
    assert (p.kind, p.message, p.estimate_ms) == ("declined", "split K", -0.2)
    p = make_agent(agent_settings({"backend": "command", "command": "sleep 30", "timeout_s": 0.5})).propose(brief(), repo)
    assert p.kind == "failed" and p.timed_out and "timed out after 0.5s" in p.reason


# ---- anthropic, against a local Messages API -------------------------------------------------

def tool_use(i, name, **inp):
    return {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": inp}


def script(*turns, usage=lambda i: (100, 20)):
    """The anthropic backend's session (requests whose tools include ``finish``), one list of
    content blocks per turn; ``usage(turn)`` = (input, output) tokens of its reply."""
    return Script(list(turns), tools=("finish",),
                  usage=lambda i: dict(zip(("input_tokens", "output_tokens"), usage(i))))


def tool_results(request) -> dict:
    """tool_use_id -> tool_result block of the last user message of a request."""
    return {b["tool_use_id"]: b for b in request["messages"][-1]["content"]}


def test_anthropic_loop_edits_refuses_tests_and_commits(repo, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-parent-secret")
    old = '"moe.experts.block_m": (16, (16, 32, 64)),'
    new = '"moe.experts.block_m": (32, (16, 32, 64)),'
    api = MessagesAPI(script(
        [{"type": "text", "text": "Looking around."},
         tool_use(1, "list_files", glob="kernels/k31/**/*.py")],
        [tool_use(2, "read_file", path="kernels/k31/moe/tunables.py")],
        [tool_use(3, "edit_file", path="kernels/k31/moe/tunables.py", old=old, new=new)],
        [tool_use(4, "edit_file", path="kernels/k31/reference.py", old="1", new="2"),
         tool_use(5, "write_file", path="../escape.txt", content="x")],
        [tool_use(6, "run_quick_test")],
        [tool_use(7, "finish", kind="commit", message="moe: block_m 32")],
        usage=lambda i: (1000, 50) if i == 5 else (100, 20)))
    try:
        agent = make_agent(agent_settings({"backend": "anthropic", "model": "claude-sonnet-4-5", "max_turns": 10,
                            "max_retries": 0}), api_key="test-key", base_url=api.url)
        quick = (f"{sys.executable} -c \"import os; "
                 f"print('quick ok', os.environ.get('ANTHROPIC_API_KEY'))\"")
        p = agent.propose(brief(quick_test=quick), repo)
    finally:
        api.close()
    assert p.kind == "commit" and p.message == "moe: block_m 32", p.reason
    assert commits_since_main(repo) == ["moe: block_m 32"]
    assert changed_files(repo) == ["kernels/k31/moe/tunables.py"]
    assert new in (repo / "kernels/k31/moe/tunables.py").read_text()
    assert (repo / "kernels/k31/reference.py").read_text() == "REFERENCE = 1\n"
    assert not (repo.parent / "escape.txt").exists()
    reqs = api.session_requests()
    assert len(reqs) == 6 and reqs[0]["system"] == "BRIEF: make moe.experts faster"
    assert not api.errors and not api.side and len(api.requests) == 6
    # the key the backend was given, whichever header this SDK version sends it in
    assert {r["headers"].get("x-api-key") or r["headers"].get("authorization", "")
            .removeprefix("Bearer ") for r in api.requests} == {"test-key"}
    listed = tool_results(reqs[1])["toolu_1"]
    assert "kernels/k31/moe/tunables.py" in listed["content"] and not listed["is_error"]
    assert "# keep this comment" in tool_results(reqs[2])["toolu_2"]["content"]
    refused = tool_results(reqs[4])
    assert refused["toolu_4"]["is_error"] is True
    assert "protected" in refused["toolu_4"]["content"]
    assert "kernels/k31/reference.py" in refused["toolu_4"]["content"]
    assert refused["toolu_5"]["is_error"] is True and "outside" in refused["toolu_5"]["content"]
    quick_out = tool_results(reqs[5])["toolu_6"]
    assert "quick ok None" in quick_out["content"] and "exit status 0" in quick_out["content"]
    assert (p.tokens_in, p.tokens_out) == api.served_tokens() == (5 * 100 + 1000, 5 * 20 + 50)
    assert p.cost_usd == pytest.approx((1500 * 3 + 150 * 15) / 1e6)
    transcript = Path(p.transcript)
    assert transcript.parent == repo.parent
    events = [json.loads(x)["event"] for x in transcript.read_text().splitlines()]
    assert events[0] == "brief" and events[-1] == "end" and events.count("tool") == 7
    assert "sk-parent-secret" not in transcript.read_text()


def test_anthropic_declines_and_caps_turns(repo):
    api = MessagesAPI(script(
        [tool_use(1, "finish", kind="declined", message="no idea")],  # no estimate
        [tool_use(2, "finish", kind="declined", message="split K", estimate_ms=-0.3)]))
    try:
        p = make_agent(agent_settings({"backend": "anthropic", "max_retries": 0}), api_key="k", base_url=api.url).propose(brief(), repo)
        assert (p.kind, p.message, p.estimate_ms) == ("declined", "split K", -0.3)
        assert tool_results(api.session_requests()[1])["toolu_1"]["is_error"] is True
        api.script = script(*[[{"type": "text", "text": "hmm"}]] * 3)
        p = make_agent(agent_settings({"backend": "anthropic", "max_turns": 3, "max_retries": 0}), api_key="k",
                           base_url=api.url).propose(brief(attempt=2), repo)
        assert p.kind == "failed" and "max_turns=3" in p.reason and p.tokens_out == 60
        api.script = script()  # no turn: the server answers 400, script exhausted
        p = make_agent(agent_settings({"backend": "anthropic", "max_retries": 0}), api_key="k", base_url=api.url).propose(
            brief(attempt=3), repo)
        assert p.kind == "failed" and "Messages API" in p.reason and "script exhausted" in p.reason
    finally:
        api.close()
    assert commits_since_main(repo) == []


# ---- claude-code ---------------------------------------------------------------------------

@dataclasses.dataclass
class FakeHookMatcher:
    matcher: str | None = None
    hooks: list = dataclasses.field(default_factory=list)
    timeout: float | None = None
    on_failure: str | None = None


class FakeSDK:
    HookMatcher = FakeHookMatcher

    class ClaudeAgentOptions:
        def __init__(self, **kw):
            self.__dict__.update(kw)


def test_claude_code_options_and_permission_hook(repo):
    opts = claude_code.build_options(FakeSDK, agent_section({"backend": "claude-code", "max_turns": 7,
                                                                    "max_budget_usd": 0.5}),
                                     brief(), repo)
    assert opts.tools == opts.allowed_tools == ["Read", "Edit", "Write", "Glob", "Grep", "Bash"]
    assert opts.cwd == str(repo) and opts.max_turns == 7 and opts.model == "claude-sonnet-4-5"
    assert opts.max_budget_usd == 0.5
    assert opts.setting_sources == [] and opts.env["GIT_AUTHOR_NAME"] == "kern-loop claude-code"
    (m,) = opts.hooks["PreToolUse"]
    assert m.matcher == "Edit|Write|MultiEdit|NotebookEdit" and m.on_failure == "block"
    hook = m.hooks[0]

    def decide(tool, path):
        return asyncio.run(hook({"tool_name": tool, "tool_input": {"file_path": path}}, "t", {}))

    assert decide("Edit", str(repo / "kernels/k31/moe/tunables.py")) == {}
    assert decide("Write", "kernels/k31/moe/new.py") == {}
    denied = decide("Edit", str(repo / "kernels/k31/reference.py"))["hookSpecificOutput"]
    assert denied["permissionDecision"] == "deny" and "protected" in denied["permissionDecisionReason"]
    denied = decide("Write", "/tmp/elsewhere.py")["hookSpecificOutput"]
    assert denied["permissionDecision"] == "deny" and "outside" in denied["permissionDecisionReason"]
    assert decide("Read", "/etc/hosts") == {}  # reads are not edits
    assert "kernels/k31/**" in claude_code.prompt_for(brief())


def test_claude_code_without_sdk(repo, monkeypatch):
    monkeypatch.setitem(sys.modules, "claude_agent_sdk", None)  # import fails as if missing
    p = make_agent(agent_settings({"backend": "claude-code"})).propose(brief(), repo)
    assert p == Proposal(kind="failed",
                         reason="claude-agent-sdk not installed: pip install 'kern-loop[agents]'")


# ---- registry and run.py -------------------------------------------------------------------

def test_make_agent_names_the_setting():
    with pytest.raises(AgentConfigError) as e:
        make_agent(agent_settings({"backend": "gpt"}))
    assert "agent.backend" in str(e.value) and "tuner" in str(e.value) and "'gpt'" in str(e.value)
    with pytest.raises(AgentConfigError, match="agent.command"):
        make_agent(agent_settings({"backend": "command", "command": ""}))
    with pytest.raises(AgentConfigError, match="bogus"):
        make_agent(agent_settings({"backend": "tuner"}), bogus=1)


def test_run_turns_an_exception_into_a_failed_proposal(repo, tmp_path, monkeypatch):
    b, s, out = tmp_path / "brief.json", tmp_path / "settings.json", tmp_path / "p.json"
    b.write_text(json.dumps(brief().as_dict()))

    class Boom:
        name = "tuner"

        def __init__(self, settings, **kw):
            pass

        def propose(self, brief, worktree):
            raise RuntimeError("agent exploded")

    monkeypatch.setattr("harness.agents.registry.agent_class", lambda backend: Boom)
    s.write_text(json.dumps({"agent": {"backend": "tuner"}}))
    assert agent_run.main(["--brief", str(b), "--worktree", str(repo), "--settings", str(s),
                           "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["kind"] == "failed" and "RuntimeError: agent exploded" in got["reason"]


def test_run_subprocess_end_to_end(repo, tmp_path):
    b, s, out = tmp_path / "brief.json", tmp_path / "settings.json", tmp_path / "p.json"
    b.write_text(json.dumps(brief().as_dict()))
    s.write_text(json.dumps({"agent": {"backend": "tuner"},
                             "context": {"seed": 0, "tree": "kernels/k31", "index": 0}}))
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-m", "harness.agents.run", "--brief", str(b),
                        "--worktree", str(repo), "--settings", str(s), "--out", str(out)],
                       cwd=root, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    assert got["kind"] == "commit" and commits_since_main(repo) == [got["message"]]
    s.write_text(json.dumps({"agent": {"backend": "replay", "replay_dir": "nowhere"},
                             "context": {"index": 0, "root": str(tmp_path)}}))
    r = subprocess.run([sys.executable, "-m", "harness.agents.run", "--brief", str(b),
                        "--worktree", str(repo), "--settings", str(s), "--out", str(out)],
                       cwd=root, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(root)})
    got = json.loads(out.read_text())
    assert r.returncode == 0 and got["kind"] == "failed" and "agent.replay_dir" in got["reason"]


def test_run_on_sigterm_ends_the_agents_children(repo, tmp_path):
    """The orchestrator's timeout: SIGTERM to run.py leaves a failed proposal and no orphans."""
    import signal
    import time

    b, s, out = tmp_path / "brief.json", tmp_path / "settings.json", tmp_path / "p.json"
    pidfile = tmp_path / "agent.pid"
    b.write_text(json.dumps(brief().as_dict()))
    s.write_text(json.dumps({"agent": {"backend": "command",
                                       "command": f"echo $$ > {pidfile}; sleep 60 & sleep 61"}}))
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "harness.agents.run", "--brief", str(b),
                             "--worktree", str(repo), "--settings", str(s), "--out", str(out)],
                            cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    got = json.loads(out.read_text())
    assert got["kind"] == "failed" and "SIGTERM" in got["reason"]
    group = int(pidfile.read_text())
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the agent's process group {group} outlived run.py")


def test_a_patch_names_its_target_before_its_diff(tmp_path):
    from harness.agents.replay import patch_target, target_at

    assert patch_target("kernels: radix top-k\n\nTarget: mla.topk\n\ndiff --git a/x b/x\n") == "mla.topk"
    assert patch_target("From abc Mon Sep 17\nSubject: [PATCH] x\n\nwhy\n\nTarget:  dense projections (cuBLAS) \n---\n") \
        == "dense projections (cuBLAS)"
    # a 'Target:' inside the diff is code, not the header
    assert patch_target("subject\ndiff --git a/x b/x\n+Target: moe.experts\n") is None
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "01-a.patch").write_text("a\nTarget: moe.experts\ndiff --git a/x b/x\n")
    (folder / "02-b.json").write_text('{"declined": "x", "estimate_ms": 0}')
    assert [target_at(folder, i) for i in range(4)] == ["moe.experts", None, None, None]


def test_a_change_is_the_profile_row_of_the_ops_it_touches():
    from harness.planning import DENSE_ROW, row_of_change

    families = {"moe.experts": "moe", "mla.topk": "mla", "dense.linear": "dense"}
    assert row_of_change({"moe.experts"}, families) == "moe.experts"
    assert row_of_change({"mla.topk", "dense.linear"}, families) == f"{DENSE_ROW}, mla.topk"
    assert row_of_change(None, families) == "" and row_of_change(set(), families) == ""


def test_the_planner_briefs_only_the_allowed_rows():
    from harness.planning import plan

    ops = {"moe.experts": {"ms": 60.0, "floor_ms": 30.0}, "dense projections (cuBLAS)": {"ms": 35.0, "floor_ms": 6.0},
           "mla.topk": {"ms": 4.0, "floor_ms": 0.05}}
    every = [t.name for t in plan(ops, 100.0, [], 3)]
    assert every == ["moe.experts", "dense projections (cuBLAS)", "mla.topk"]  # by headroom
    only = [t.name for t in plan(ops, 100.0, [], 3, allowed=("moe.experts",))]
    assert only == ["moe.experts"]
    assert plan(ops, 100.0, [], 3, allowed=("moe.experts",), busy={"moe.experts"}) == []
