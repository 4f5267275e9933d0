"""The sandbox of a side (gates/launch/sandbox.py, gates/side/confine.py): the pure decisions (which
mechanism kern.yaml's ``sandbox`` gets, what a side's plan shows and lets it write), then
side-like processes really confined on this machine: what they can read, write and reach.

The real candidate commits that try the same through the gates are in
``tests/adversarial/test_sandbox_hacks.py``."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from gates.launch import sandbox as S
from gates.launch.process import side_env
from gates.requests import Placement
from gates.rules import confinement as C

M = C.Machine(uid=1000, gid=1000, home="/home/u", python=("/home/u/.venv", "/opt/py3.11"),
              libraries=("/usr/local/cuda", "/home/u", "/srv/repo", "/srv/repo/runs/tap/x"),
              devices=("/dev/nvidia0", "/dev/nvidiactl"), harness="/srv/repo", user=("nobody", 65534, 65534))


def driver(mode, tree, out, spec=None):
    return [sys.executable, "-m", "gates.side.driver", mode, "--tree", str(tree), "--spec",
            str(spec or Path(out).with_suffix(".spec.json")), "--out", str(out)]


# --------------------------------------------------------------------------- pure
@pytest.mark.parametrize("mode,facts,got", [
    ("auto", C.Facts("", 7), "namespaces"),
    ("auto", C.Facts("unshare(user): Operation not permitted", 7), "landlock"),
    ("landlock", C.Facts("", 7), "landlock"),
    ("namespaces", C.Facts("", 0), "namespaces"),
    ("off", C.Facts("no", 0), "off"),
    ("auto", C.Facts("unshare(user): Operation not permitted", 0, ""), "user"),
    ("auto", C.Facts("unshare(user): Operation not permitted", 7, ""), "landlock"),
    ("user", C.Facts("", 7, ""), "user"),
])
def test_the_strongest_mechanism_the_machine_allows(mode, facts, got):
    assert C.choose(mode, facts) == got


@pytest.mark.parametrize("mode,facts,words", [
    ("auto", C.Facts("unshare(user): Operation not permitted", 0), "none available"),
    ("namespaces", C.Facts("unshare(user): Operation not permitted", 7), "namespaces asked for"),
    ("landlock", C.Facts("", 0), "landlock asked for"),
    ("user", C.Facts("", 7, "the launcher is not root (uid 1000)"), "user asked for"),
    ("bubblewrap", C.Facts("", 7), "expected one of auto, namespaces, landlock, user, off"),
])
def test_no_sandbox_names_who_fixes_it(mode, facts, words):
    with pytest.raises(C.SandboxUnavailable) as e:
        C.choose(mode, facts)
    assert words in str(e.value)
    if mode != "bubblewrap":
        assert "operator:" in str(e.value) and "`sandbox: off`" in str(e.value)


NS_NO = "unshare(user): Operation not permitted"


@given(mode=st.sampled_from([*C.MODES, "bubblewrap", "", "Namespaces"]),
       ns=st.sampled_from(["", NS_NO]), abi=st.integers(0, 7),
       user=st.sampled_from(["", "the launcher is not root (uid 1000)", "no user 'nobody' on this machine"]))
def test_choose_takes_the_strongest_available_or_names_every_fix(mode, ns, abi, user):
    """Over every machine (namespaces, landlock ABI, the sandbox user) and mode: ``auto`` picks
    namespaces, else landlock, else user; a named mechanism is given exactly where available;
    a refusal names what was asked, why not, and every fix (the operator's and kern.yaml's)."""
    f = C.Facts(ns, abi, user)
    available = [m for m, ok in (("namespaces", not ns), ("landlock", abi >= 1), ("user", not user)) if ok]
    if mode == "off":
        assert C.choose(mode, f) == "off"
        return
    want = (available[0] if available else None) if mode == "auto" else \
        (mode if mode in available else None) if mode in C.MECHANISMS else "bad"
    if want not in (None, "bad"):
        assert C.choose(mode, f) == want
        return
    with pytest.raises(C.SandboxUnavailable) as e:
        C.choose(mode, f)
    text = str(e.value)
    if want == "bad":
        assert f"expected one of {', '.join(C.MODES)}, found {mode!r}" in text
        return
    assert ("none available" if mode == "auto" else f"{mode} asked for") in text
    assert "operator:" in text and "`sandbox: off`" in text and "`sandbox: user`" in text
    assert "landlock" in text and "namespaces" in text
    if mode in ("auto", "user"):
        assert user in text


def test_a_side_is_read_off_its_command_line():
    side = C.side_of(driver("tap", "/srv/repo/runs/worktrees/abc", "/srv/repo/runs/tap/b/result.json"),
                     {"record": "/srv/repo/runs/tap/b/main"})
    assert (side.mode, side.tree, side.run_dir) == ("tap", "/srv/repo/runs/worktrees/abc", "/srv/repo/runs/tap/b")
    assert side.readonly == ("/srv/repo/runs/tap/b/main",) and side.writes == side.run_dir
    with pytest.raises(ValueError, match="bug of the launcher"):
        C.side_of([sys.executable, "-c", "pass"], None)


def test_a_run_side_writes_into_its_stage_and_only_its_documents_come_back():
    """kern step --out may name any file (the repository's root): a step side never gets that
    folder, only a stage beside it; its document, its ranks' and their partials come back."""
    side = C.side_of(driver("run", "/t", "/srv/repo/step.rank1.json"), None)
    assert side.stage == "/srv/repo/.sandbox-step" and side.writes == side.stage
    cmd = C.staged(driver("run", "/t", "/srv/repo/step.rank1.json", "/srv/repo/step.spec.json"), side)
    assert cmd[cmd.index("--out") + 1] == "/srv/repo/.sandbox-step/step.rank1.json"
    assert cmd[cmd.index("--spec") + 1] == "/srv/repo/.sandbox-step/step.spec.json"
    import re
    ok = [n for n in ("step.json", "step.rank0.json", "step.rank1.partial.json", "step.partial.json",
                      "pyproject.toml", "step.json.bak", "gates", "x.step.json") if re.match(side.outputs, n)]
    assert ok == ["step.json", "step.rank0.json", "step.rank1.partial.json", "step.partial.json"]
    tap = C.side_of(driver("tap", "/t", "/r/tap/a/record.json"), None)
    assert C.staged(driver("tap", "/t", "/r/tap/a/record.json"), tap) == driver("tap", "/t", "/r/tap/a/record.json")


def test_what_a_side_reads_leaves_out_home_harness_root_and_run_folders():
    side = C.side_of(driver("tap", "/srv/repo/runs/worktrees/abc", "/srv/repo/runs/tap/x/r.json"), None)
    ro = C.readable([side], M)
    assert "/srv/repo/gates" in ro and "/srv/repo/runs/worktrees/abc/kernels" in ro
    assert "/usr/local/cuda" in ro and "/home/u/.venv" in ro  # named: Python, CUDA
    # a library path that would show the home, the harness's root (runs/: the ledger) or a run folder
    assert not {"/home/u", "/srv/repo", "/srv/repo/runs/tap/x", "/"} & set(ro)
    assert not any(p.startswith("/home/u/.triton") for p in ro)
    assert "/etc/passwd" in ro and not any(p in ("/etc", "/etc/shadow", "/root", "/home") for p in ro)
    assert C.writable([side], M) == ["/srv/repo/runs/tap/x", "/srv/repo/runs/tap/.triton-x/r"]


@pytest.mark.parametrize("mechanism", ["namespaces", "landlock", "user", "off"])
def test_every_side_has_a_private_triton_cache_removed_when_it_ends(mechanism):
    """Under every mechanism (and off) a side's Triton cache is its own and removed when it
    ends: two sides of one tree, of one run folder, or two ranks of one side never share one,
    and it lies outside the run folder, which sides share (the scorer's store, main's and the
    candidate's bench sides), so no other side's rules let it write there; a compile side's
    is the cache it builds, kept in its run folder."""
    def side(mode, tree, out):
        return C.side_of(driver(mode, tree, out), None)

    sides = [side("tap", "/srv/repo/runs/worktrees/aaa", "/srv/repo/runs/tap/x/record.json"),
             side("tap", "/srv/repo/runs/worktrees/aaa", "/srv/repo/runs/tap/x/noise.json"),
             side("tap", "/srv/repo/runs/worktrees/aaa", "/srv/repo/runs/tap/y/result.json"),
             side("bench", "/srv/repo/runs/worktrees/aaa", "/srv/repo/runs/bench/w/sideA.json"),
             side("bench", "/srv/repo/runs/worktrees/bbb", "/srv/repo/runs/bench/w/sideB.rank0.json"),
             side("bench", "/srv/repo/runs/worktrees/bbb", "/srv/repo/runs/bench/w/sideB.rank1.json"),
             side("store", "/srv/repo/runs/worktrees/aaa", "/srv/repo/runs/bench/w/store.json"),
             side("run", "/srv/repo/runs/worktrees/bbb", "/srv/repo/step.json")]
    caches = []
    for s in sides:
        p = C.plan(mechanism, s, M, landlock_abi=7)
        cache = p["env"]["TRITON_CACHE_DIR"]
        assert cache == s.triton_cache and cache in p["remove"], (cache, p["remove"])
        assert p["remove_empty"] == [os.path.dirname(cache)]
        own = C.writable([s], M)
        assert cache in own and (mechanism != "landlock" or p["landlock"]["write"] == own)
        for other in sides:
            if other.triton_cache != cache:
                assert not any(C.inside(other.triton_cache, w) for w in own), (s.out, other.out)
        caches.append(cache)
    assert len(set(caches)) == len(caches)
    # in a group, the folder of caches stays until the group closes (a member starts later;
    # under namespaces each member mounts only its own cache: the folder goes once empty)
    assert C.plan(mechanism, sides[3], M, sides[3:7], landlock_abi=7)["remove_empty"] == \
        ([os.path.dirname(sides[3].triton_cache)] if mechanism == "namespaces" else [])
    comp = side("compile", "/srv/repo/runs/worktrees/aaa", "/srv/repo/runs/compiled/k-side/compile.json")
    p = C.plan(mechanism, comp, M, landlock_abi=7)
    assert p["env"]["TRITON_CACHE_DIR"] == "/srv/repo/runs/compiled/k-side/triton" == comp.triton_cache
    assert not any(C.inside(comp.triton_cache, r) for r in p["remove"])
    if mechanism == "off":
        assert set(p) == {"mechanism", "uid", "gid", "cwd", "env", "stage", "remove", "remove_empty"}  # nothing else


def test_the_namespace_plan_mounts_parents_first_and_main_recording_read_only():
    side = C.side_of(driver("tap", "/srv/repo/runs/worktrees/b", "/srv/repo/runs/tap/b/result.json"),
                     {"record": "/srv/repo/runs/tap/b/main"})
    p = C.plan("namespaces", side, M, landlock_abi=7)
    paths = [m["path"] for m in p["mounts"]]
    depth = [x.rstrip("/").count("/") for x in paths]
    assert depth == sorted(depth)
    kinds = {m["path"]: m["kind"] for m in p["mounts"]}
    assert kinds["/srv/repo/runs/tap/b"] == "rw" and kinds["/srv/repo/runs/tap/b/main"] == "ro"
    assert kinds["/home/u"] == "tmpfs" and kinds["/tmp"] == "tmpfs" and kinds["/proc"] == "proc"
    assert kinds["/dev/nvidia0"] == "dev" and kinds["/dev/shm"] == "tmpfs"
    assert "/srv/repo" not in kinds and "/srv/repo/runs" not in kinds  # the ledger is not there
    assert p["env"] == {"TMPDIR": "/tmp", "TRITON_CACHE_DIR": "/srv/repo/runs/tap/.triton-b/result"}
    assert kinds["/srv/repo/runs/tap/.triton-b/result"] == "rw" and "/srv/repo/runs/tap/.triton-b" not in kinds
    # a member of a group: its own root all the same (its own cache, no other member's
    # folders), and the group's /dev/shm from the machine
    other = C.side_of(driver("store", "/srv/repo/runs/worktrees/main", "/srv/repo/runs/store/s/store.json"), None)
    grouped = C.plan("namespaces", side, M, [other, side], landlock_abi=7, shm="/dev/shm/kern-group-x")
    gk = {m["path"]: m for m in grouped["mounts"]}
    assert gk["/dev/shm"] == {"kind": "bind", "path": "/dev/shm", "source": "/dev/shm/kern-group-x"}
    assert [m for m in grouped["mounts"] if m["path"] != "/dev/shm"] == \
        [m for m in p["mounts"] if m["path"] != "/dev/shm"]
    assert not any(C.inside(x, "/srv/repo/runs/store") or C.inside(x, "/srv/repo/runs/worktrees/main") for x in gk)
    assert grouped["landlock"]["write"][:2] == ["/srv/repo/runs/tap/b", "/srv/repo/runs/tap/.triton-b/result"]
    assert grouped["remove_empty"] == ["/srv/repo/runs/tap/.triton-b"]  # no member needs it after it
    # a group's holder mounts nothing but its /proc
    assert C.held_plan(M)["mounts"] == [{"kind": "proc", "path": "/proc"}]
    assert p["landlock"]["read"] == ["/"] and "/srv/repo/runs/tap/b" in p["landlock"]["write"]
    assert p["landlock"]["tcp"] is False
    # one side's ranks share a sandbox and meet over TCP and shared memory: no landlock between them
    assert C.plan("namespaces", side, M, [side], peers=True, landlock_abi=7)["landlock"] is None


def test_the_landlock_plan_names_the_same_paths_and_opens_tcp_to_ranks_only():
    side = C.side_of(driver("bench", "/srv/repo/runs/worktrees/b", "/srv/repo/runs/bench/w/sideB.json"), None)
    p = C.plan("landlock", side, M, landlock_abi=7)
    assert p["landlock"]["read"] == C.readable([side], M) + list(C.PROC)
    assert "/proc" not in p["landlock"]["read"]  # another process's environ is not read
    assert p["landlock"]["write"] == C.writable([side], M) and p["landlock"]["tcp"] is False
    assert p["env"]["HOME"].startswith("/srv/repo/runs/bench/w/.sandbox-sideB/")
    assert p["remove"] == ["/srv/repo/runs/bench/w/.sandbox-sideB", "/srv/repo/runs/bench/.triton-w/sideB"]
    assert p["seccomp"] == {"inet_stream": False}  # sockets landlock does not cover: Unix only
    ranks = C.plan("landlock", side, M, [side], peers=True, landlock_abi=7)
    assert ranks["landlock"]["tcp"] is True and "/dev/shm" in ranks["landlock"]["write"]
    assert ranks["seccomp"] == {"inet_stream": True}


def test_the_user_plan_owns_its_folder_keeps_no_environment_and_no_network():
    """Under ``user`` a side writes its run folder (made the user's when it starts, the
    launcher's again when it ends, unless its group's close does that), keeps a private home,
    /tmp and Triton cache there, only the environment the plan names, and no network but its
    ranks' TCP."""
    side = C.side_of(driver("bench", "/srv/repo/runs/worktrees/b", "/srv/repo/runs/bench/w/sideB.json"), None)
    p = C.plan("user", side, M)
    private = "/srv/repo/runs/bench/w/.sandbox-sideB"
    assert p["user"] == {"name": "nobody", "uid": 65534, "gid": 65534} and p["owner"] == [1000, 1000]
    cache = "/srv/repo/runs/bench/.triton-w/sideB"  # its own, like every side's
    assert p["own"] == ["/srv/repo/runs/bench/w", cache] and p["remove"] == [private, cache]
    assert p["env"] == {"TMPDIR": f"{private}/tmp", "HOME": f"{private}/home", "TRITON_CACHE_DIR": cache}
    assert p["make_as_user"] == [f"{private}/tmp", f"{private}/home", cache]
    assert p["env_keep"] == list(C.ENV_KEEP) and "ANTHROPIC_API_KEY" not in p["env_keep"]
    assert p["seccomp"] == {"inet_stream": False} and p["landlock"] is None
    assert C.plan("user", side, M, [side], peers=True)["seccomp"] == {"inet_stream": True}
    run = C.side_of(driver("run", "/t", "/srv/repo/step.json"), None)
    assert C.plan("user", run, M)["own"] == ["/srv/repo/.sandbox-step", "/srv/repo/.triton-sandbox-step/step"]  # its stage, not the repository
    with pytest.raises(C.SandboxUnavailable, match="no user 'nobody' on this machine"):
        C.plan("user", side, C.Machine(uid=0, gid=0, home="/root", python=(), harness="/srv/repo"))


def test_a_side_keeps_every_variable_the_launcher_gives_it_under_user():
    """ENV_KEEP holds every variable gates/launch/process.py's side environment and a rank's carry
    (the rest of the launcher's environment never reaches a side under ``user``)."""
    from gates.launch.process import side_env
    from gates.rules.ranks import rank_env

    given_ = set(rank_env(side_env(Placement(), {"LANG": "C", "CUDA_HOME": "/x"}), 1, 2, 29500))
    assert given_ - {"HOME", "TMPDIR", "TRITON_CACHE_DIR"} <= set(C.ENV_KEEP)


def test_a_folder_others_cannot_search_is_named():
    modes = {"/": 0o755, "/root": 0o700, "/root/repo": 0o755, "/srv": 0o711, "/srv/repo": 0o751}
    assert C.blocked("/root/repo/runs/tap/b", modes.get) == "/root"
    assert C.blocked("/srv/repo/runs", modes.get) == ""
    assert C.blocked("/", modes.get) == ""


# --------------------------------------------------------------------------- real processes
needs_sandbox = pytest.mark.skipif(S.facts().namespaces != "" and S.facts().landlock_abi < 1,
                                   reason="this machine allows no sandbox")
PROBE = r"""
import json, os, socket, sys
secrets, out = json.loads(sys.argv[1]), {}
for name, path in secrets.items():
    try:
        out[name] = open(path).read()
    except OSError as e:
        out[name] = type(e).__name__
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2).sendall(b"leak")
    out["net"] = "sent"
except OSError as e:
    out["net"] = type(e).__name__
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"leak", ("127.0.0.1", int(sys.argv[5])))
    out["udp"] = "sent"
except OSError as e:
    out["udp"] = type(e).__name__
for name, path in (("outside", sys.argv[3]), ("home", os.path.expanduser("~/.bashrc"))):
    try:
        open(path, "w").write("x")
        out["wrote " + name] = "wrote"
    except OSError as e:
        out["wrote " + name] = type(e).__name__
out["pids"], out["environs"] = [], []
try:
    out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
except OSError:
    pass
for pid in [os.getppid(), *out["pids"], *sys.argv[4].split(",")]:
    try:
        out["environs"].append(open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace"))
    except OSError:
        pass
print(json.dumps(out))
"""


class Listener:
    """A TCP and a UDP listener on the machine's 127.0.0.1; ``got``: what reached them."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.settimeout(0.2)
        self.port, self.udp_port = self.sock.getsockname()[1], self.udp.getsockname()[1]
        self.got, self._stop = [], False
        self.threads = [threading.Thread(target=self._serve, daemon=True),
                        threading.Thread(target=self._serve_udp, daemon=True)]
        for t in self.threads:
            t.start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.got.append(conn.recv(4096) or b"(connected)")
                except OSError:
                    self.got.append(b"(connected)")

    def _serve_udp(self):
        while not self._stop:
            try:
                self.got.append(self.udp.recv(4096))
            except OSError:
                continue

    def close(self):
        self._stop = True
        for t in self.threads:
            t.join(timeout=5)
        self.sock.close()
        self.udp.close()


def confined(tmp_path, mode, mechanism):
    """Run PROBE as a tap side of a tree under ``tmp_path`` would run, under ``mechanism``."""
    tree, run = tmp_path / "runs" / "worktrees" / "cand", tmp_path / "runs" / "tap" / "b"
    (tree / "kernels").mkdir(parents=True)
    run.mkdir(parents=True)
    ledger = tmp_path / "runs" / "ledger.sqlite"
    ledger.write_text("SECRET-LEDGER")
    home = Path(os.environ["HOME"])
    (home / ".kern-test-secret").write_text("SECRET-HOME")
    secrets = {"home": str(home / ".kern-test-secret"), "ledger": str(ledger),
               "shadow": "/etc/shadow", "tree": str(tree / "kernels" / "nothing")}
    listener = Listener()
    try:
        side_cmd = [sys.executable, "-c", PROBE, json.dumps(secrets), str(listener.port),
                    str(tmp_path / "runs" / "planted.txt"), f"{os.getpid()},{os.getppid()}",
                    str(listener.udp_port),
                    "gates.side.driver", mode, "--tree", str(tree), "--out", str(run / "out.json")]
        cmd = S.wrap(side_cmd, Placement(sandbox=mechanism))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=S.HARNESS_ROOT,
                           env=side_env(Placement()))
    finally:
        listener.close()
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), listener.got, tmp_path


SECRET_ENV = "sk-ant-kern-sandbox-secret"


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_ENV)  # what the loop's own process holds
    return h


@needs_sandbox
@pytest.mark.parametrize("mechanism", ["namespaces", "landlock"])
def test_a_confined_process_reads_no_secret_writes_nothing_outside_and_reaches_no_listener(
        tmp_path, home, mechanism):
    if mechanism == "namespaces" and S.facts().namespaces:
        pytest.skip(S.facts().namespaces)
    if mechanism == "landlock" and S.facts().landlock_abi < 4:
        pytest.skip("landlock without TCP rules")
    got, heard, root = confined(tmp_path, "tap", mechanism)
    missing = {"FileNotFoundError", "PermissionError"}
    assert got["home"] in missing and got["ledger"] in missing and got["shadow"] in missing, got
    assert got["net"] in {"PermissionError", "ConnectionRefusedError", "OSError", "TimeoutError"}, got
    assert heard == []
    # what it wrote outside its run folder landed nowhere anyone else reads (namespaces: the
    # sandbox's own /tmp and home, gone with it; landlock: refused)
    assert not (root / "runs" / "planted.txt").exists() and not (home / ".bashrc").exists()
    if mechanism == "landlock":
        assert got["wrote outside"] == "PermissionError", got
        assert got["udp"] == got["net"] == "PermissionError", got  # seccomp, landlock
    # the launcher's environment (API keys) stays out, whichever process's /proc is tried
    assert not any(SECRET_ENV in e for e in got["environs"]), got
    if mechanism == "namespaces":
        assert got["pids"] == [1, 2] or got["pids"] == [2], got  # a PID namespace of its own


@needs_sandbox
def test_a_run_sides_stage_hands_back_only_its_documents(tmp_path, home):
    """A step side writes into a stage; its document comes back beside where kern step asked,
    a file it names otherwise (here: the repository's pyproject) does not."""
    tree, out_dir = tmp_path / "tree", tmp_path / "repo"
    (tree / "kernels").mkdir(parents=True)
    out_dir.mkdir()
    (out_dir / "pyproject.toml").write_text("mine")
    spec = out_dir / "step.spec.json"
    spec.write_text(json.dumps({"rows": [1]}))
    code = ("import json, os, sys; a = sys.argv; out = a[a.index('--out') + 1]; "
            "spec = json.load(open(a[a.index('--spec') + 1])); "
            "open(out, 'w').write(json.dumps(spec)); "
            "open(os.path.join(os.path.dirname(out), 'pyproject.toml'), 'w').write('hacked')")
    cmd = [sys.executable, "-c", code, "gates.side.driver", "run", "--tree", str(tree), "--spec", str(spec),
           "--out", str(out_dir / "step.json")]
    r = subprocess.run(S.wrap(cmd, Placement()), capture_output=True, text=True, timeout=120, cwd=S.HARNESS_ROOT)
    assert r.returncode == 0, r.stderr
    assert json.loads((out_dir / "step.json").read_text()) == {"rows": [1]}
    assert (out_dir / "pyproject.toml").read_text() == "mine"
    assert sorted(p.name for p in out_dir.iterdir()) == ["pyproject.toml", "step.json", "step.spec.json"]


@needs_sandbox
def test_the_wrapper_adds_a_fraction_of_a_second_to_a_side(tmp_path, home):
    """What CI pays per side (a side itself takes seconds: torch's import alone is one)."""
    import time

    tree = tmp_path / "tree"
    (tree / "kernels").mkdir(parents=True)
    cmd = [sys.executable, "-c", "pass", "gates.side.driver", "tap", "--tree", str(tree), "--out",
           str(tmp_path / "run" / "o.json")]
    S.facts()  # probed once per process, not per side

    def best(c):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run(c, check=True, cwd=S.HARNESS_ROOT)
            times.append(time.perf_counter() - t0)
        return min(times)

    plain, boxed = best(cmd), best(S.wrap(cmd, Placement()))
    assert boxed - plain < 0.5, (plain, boxed)


def test_the_loop_refuses_to_start_without_a_sandbox_and_names_the_fix(tmp_path, monkeypatch, capsys):
    from harness import cli
    from tests.gates.candidates import make_repo

    repo = make_repo(tmp_path)
    monkeypatch.setattr(S, "facts", lambda: C.Facts("unshare(user): Operation not permitted", 0))
    assert cli.main(["--repo", str(repo), "loop", "--tick", "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "kern loop: refusing to start: sandbox: none available" in err
    assert "`sandbox: off` in kern.yaml" in err and "operator:" in err


# a member of a group: publishes its PID in the group's /dev/shm (as torch's CUDA IPC keeps its
# consumer counts there) and plants a file in its own run folder, then waits
GROUP_FIRST = ("import os, sys, time; open(os.path.join(sys.argv[1], 'planted'), 'w').write('A'); "
               "open('/dev/shm/kern-shared', 'w').write(str(os.getpid())); print(os.getpid(), flush=True); "
               "time.sleep(60)")
# another member: what it sees of the first one (its PID, its tree, its run folder, its memory)
# and of itself; it leaves a process behind (double fork, setsid) named by a marker
GROUP_SECOND = r"""
import json, os, subprocess, sys, time
other_tree, other_run, own_tree, own_run, marker, stay = sys.argv[1:7]
while not os.path.exists('/dev/shm/kern-shared'):
    time.sleep(0.05)
pid = int(open('/dev/shm/kern-shared').read())
out = {'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), 'peer': pid}
for name, path in (('other tree', other_tree), ('other run', other_run), ('own tree', own_tree),
                   ('own run', own_run)):
    try:
        out[name] = sorted(os.listdir(path))
    except OSError as e:
        out[name] = type(e).__name__
try:
    out['planted'] = open(os.path.join(other_run, 'planted')).read()
except OSError as e:
    out['planted'] = type(e).__name__
try:
    open(f'/proc/{pid}/mem', 'rb'); out['mem'] = 'read'
except OSError as e:
    out['mem'] = type(e).__name__
if os.fork() == 0:  # a daemon: double-forked, in a session of its own
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', marker])
    os._exit(0)
os.wait()
time.sleep(0.3)
print(json.dumps(out), flush=True)
if stay == "stay":  # until killed
    time.sleep(60)
"""


def _marked(marker: str) -> list[int]:
    """The machine's processes whose command line holds ``marker``."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def _none_marked(marker: str, within_s: float = 10.0) -> bool:
    import time

    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not _marked(marker):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(S.facts().namespaces != "", reason="needs the namespace sandbox")
@pytest.mark.parametrize("ending", ["ends", "killed"])
def test_sides_of_other_trees_and_run_folders_join_one_held_group_each_in_its_own_root(tmp_path, home, ending):
    """A held group (the model store's, which outlives judgments) admits sides whatever their
    trees and run folders: each builds its own root, so it sees its own tree and run folder and
    not the other's (a file planted in the other's run folder is not there), but they share one
    PID namespace and /dev/shm (what CUDA IPC and torch's consumer counts need); landlock keeps
    one from reading the other's memory. A process a side leaves behind (double fork, setsid)
    is gone when its side ends, or is killed, while the group still holds."""
    import uuid

    trees = {k: tmp_path / f"tree{k}" for k in "AB"}
    for t in trees.values():
        (t / "kernels").mkdir(parents=True)
    runs = {"A": tmp_path / "runs" / "store" / "s1", "B": tmp_path / "runs" / "tap" / "t1"}
    marker = f"kern-left-behind-{uuid.uuid4().hex}"

    def side(code, mode, k, *args):
        return [sys.executable, "-c", code, *args, "gates.side.driver", mode, "--tree", str(trees[k]),
                "--out", str(runs[k] / f"{mode}.json")]

    with S.group("store", trees["A"], runs["A"] / "store.json", peers=False) as box:
        a = subprocess.Popen(S.wrap(side(GROUP_FIRST, "store", "A", str(runs["A"])), Placement(), box),
                             stdout=subprocess.PIPE, text=True, cwd=S.HARNESS_ROOT, env=side_env(Placement()))
        try:
            a.stdout.readline()
            args = [str(trees["A"]), str(runs["A"]), str(trees["B"]), str(runs["B"]), marker,
                    "stay" if ending == "killed" else "go"]
            b = subprocess.Popen(S.wrap(side(GROUP_SECOND, "tap", "B", *args), Placement(), box),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 cwd=S.HARNESS_ROOT, env=side_env(Placement()))
            line = b.stdout.readline()
            assert line, b.stderr.read()
            got = json.loads(line)
            assert _marked(marker), "the side's daemon did not start"
            if ending == "killed":  # its launcher killed outright (the side's J): K goes with it
                b.kill()
            assert b.wait(timeout=60) == (-9 if ending == "killed" else 0), b.stderr.read()
            assert _none_marked(marker), f"a process the side left behind outlived it: {_marked(marker)}"
            assert a.poll() is None  # the group still holds, its other member still runs
        finally:
            a.kill()
            a.wait()
    assert got["peer"] in got["pids"] and 1 in got["pids"], got  # one PID namespace
    assert got["own tree"] == ["kernels"] and got["own run"] == [], got  # its own, empty run folder
    assert got["other tree"] == "FileNotFoundError" and got["other run"] == "FileNotFoundError", got
    assert got["planted"] == "FileNotFoundError", got
    assert got["mem"] == "PermissionError", got  # landlock per process
    assert (runs["A"] / "planted").read_text() == "A"
    assert not os.path.exists(box.shm or "/nonexistent") and box.shm is None  # its /dev/shm went with it


@pytest.mark.skipif(S.facts().namespaces != "", reason="needs the namespace sandbox")
def test_the_ranks_of_one_side_meet_without_landlock_and_admit_no_other_side(tmp_path, home):
    """Ranks of one side (peers) share the group's PID namespace and /dev/shm without landlock
    between them (NCCL, TCP); a side of another tree or run folder is refused their group."""
    tree, run = tmp_path / "tree", tmp_path / "runs" / "tap" / "r"
    (tree / "kernels").mkdir(parents=True)

    def rank(code, r, *args, t=tree, folder=run):
        return [sys.executable, "-c", code, *args, "gates.side.driver", "tap", "--tree", str(t),
                "--out", str(folder / f"side.rank{r}.json")]

    with S.group("tap", tree, run / "side.json", peers=True) as box:
        other = tmp_path / "other"
        (other / "kernels").mkdir(parents=True)
        with pytest.raises(ValueError, match="no other side may join them"):
            S.wrap(rank("pass", 0, t=other, folder=tmp_path / "runs" / "tap" / "o"), Placement(), box)
        a = subprocess.Popen(S.wrap(rank(GROUP_FIRST, 0, str(run)), Placement(), box), stdout=subprocess.PIPE,
                             text=True, cwd=S.HARNESS_ROOT, env=side_env(Placement()))
        try:
            a.stdout.readline()
            r = subprocess.run(S.wrap(rank(GROUP_SECOND, 1, str(tree), str(run), str(tree), str(run), "kern-rank", "go"),
                                      Placement(), box), capture_output=True, text=True, timeout=60,
                               cwd=S.HARNESS_ROOT, env=side_env(Placement()))
        finally:
            a.kill()
            a.wait()
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["peer"] in got["pids"] and got["mem"] == "read", got
    assert got["planted"] == "A" and got["own tree"] == ["kernels"], got  # one side's folder


# a member standing for the model store: it maps two files of the group's /dev/shm (as the store
# keeps torch's CUDA IPC counts mapped), says its PID, then its /proc/self/maps on every line
SHM_MAPPER = r"""
import json, mmap, os, sys
held = []
for name in ("torch_2_keep", "torch_2_swapped"):
    fd = os.open("/dev/shm/" + name, os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, 4096)
    held.append(mmap.mmap(fd, 4096))
print(os.getpid(), flush=True)
for _ in sys.stdin:
    print(json.dumps(os.fsdecode(open("/proc/self/maps", "rb").read())), flush=True)
"""
# a later member (a candidate's side): what it leaves in the group's /dev/shm for later sides
SHM_PLANTER = r"""
import os, sys
d = "/dev/shm/"
open(d + "planted", "w").write("for the next judgment")
open(d + "torch_%s_x" % sys.argv[1], "w").write("named like the store's")
os.makedirs(d + "dir/sub")
open(d + "dir/sub/f", "w").write("x")
os.chmod(d + "dir/sub", 0)
os.symlink("/tmp", d + "link")
os.link(d + "torch_2_keep", d + "torch_2_keep.link")  # the store's inode, another name
os.unlink(d + "torch_2_swapped")  # the store's name, another inode
open(d + "torch_2_swapped", "w").write("planted under the store's name")
"""


@pytest.mark.skipif(S.facts().namespaces != "", reason="needs the namespace sandbox")
def test_a_groups_dev_shm_is_swept_of_all_but_the_files_a_live_member_maps(tmp_path, home):
    """The model store's sweep after a lease (gates/rules/shm.py), on a real group: a member
    maps files of the group's /dev/shm, a later member plants files, a folder it made
    unreadable, a link, a hard link to a mapped file and a file under a mapped file's name;
    once it ended, the sweep keeps (by name and inode, read off the mapper's own maps inside
    the sandbox) the mapped file alone, and the mapper still holds it."""
    from gates.rules import shm as H

    trees = {k: tmp_path / f"tree{k}" for k in "AB"}
    for t in trees.values():
        (t / "kernels").mkdir(parents=True)
    runs = {"A": tmp_path / "runs" / "store" / "s1", "B": tmp_path / "runs" / "tap" / "t1"}

    def side(code, mode, k, *args):
        return [sys.executable, "-c", code, *args, "gates.side.driver", mode, "--tree", str(trees[k]),
                "--out", str(runs[k] / f"{mode}.json")]

    with S.group("store", trees["A"], runs["A"] / "store.json", peers=False) as box:
        a = subprocess.Popen(S.wrap(side(SHM_MAPPER, "store", "A"), Placement(), box), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=S.HARNESS_ROOT,
                             env=side_env(Placement()))
        try:
            pid = a.stdout.readline().strip()
            assert pid, a.stderr.read()
            r = subprocess.run(S.wrap(side(SHM_PLANTER, "tap", "B", pid), Placement(), box), capture_output=True,
                               text=True, timeout=60, cwd=S.HARNESS_ROOT, env=side_env(Placement()))
            assert r.returncode == 0, r.stderr
            a.stdin.write("maps\n")
            a.stdin.flush()
            maps = json.loads(a.stdout.readline())
            assert "/dev/shm/torch_2_swapped (deleted)" in maps  # the mapper's file was unlinked
            keep = H.mapped(maps)
            assert {n for n, _ in keep} == {"torch_2_keep"}
            done = box.sweep_shm(keep)
            assert done == H.ShmSweep(tuple(sorted(["dir", "link", "planted", f"torch_{pid}_x",
                                                    "torch_2_keep.link", "torch_2_swapped"])))
            assert os.listdir(box.shm) == ["torch_2_keep"]
            a.stdin.write("maps\n")
            a.stdin.flush()
            assert keep <= H.mapped(json.loads(a.stdout.readline()))  # it still maps its file
        finally:
            a.kill()
            a.wait()


def test_kern_test_without_a_sandbox_says_who_fixes_it(tmp_path, monkeypatch, capsys):
    """A gate verb started where no sandbox can be made ends before any side starts, with the
    fix (kern.yaml's sandbox: off, or the operator's)."""
    from harness import cli
    from tests.gates.candidates import candidate, make_repo

    repo = make_repo(tmp_path)
    sha = candidate(repo, "same", [("kernels/k31/moe/combine.py", "def moe_combine(", "# c\ndef moe_combine(")])
    monkeypatch.setattr(S, "facts", lambda: C.Facts("unshare(user): Operation not permitted", 0))
    assert cli.main(["--repo", str(repo), "test", sha, "--vs", "main"]) == 2
    err = capsys.readouterr().err
    assert "kern test: sandbox: none available" in err and "`sandbox: off` in kern.yaml" in err
    assert all(not p.read_text() for p in (repo / "runs").rglob("*.log"))  # no side started


def test_kern_yaml_names_the_sandbox_modes_the_gates_know():
    from harness.settings import SANDBOX_MODES

    assert SANDBOX_MODES == C.MODES


USER_PROBE = r"""
import json, os, socket, sys
a = sys.argv
secrets, port, udp_port, launcher = json.loads(a[1]), int(a[2]), int(a[3]), a[4]
out = {"uid": os.getuid(), "groups": os.getgroups(), "env": sorted(os.environ)}
for name, path in secrets.items():
    try:
        out[name] = open(path).read()
    except OSError as e:
        out[name] = type(e).__name__
for name, path in (("list runs", os.path.dirname(secrets["ledger"])), ("list tap", a[5])):
    try:
        out[name] = os.listdir(path)
    except OSError as e:
        out[name] = type(e).__name__
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).sendall(b"leak")
    out["net"] = "sent"
except OSError as e:
    out["net"] = type(e).__name__
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"leak", ("127.0.0.1", udp_port))
    out["udp"] = "sent"
except OSError as e:
    out["udp"] = type(e).__name__
try:
    out["launcher environ"] = open(f"/proc/{launcher}/environ", "rb").read().decode(errors="replace")
except OSError as e:
    out["launcher environ"] = type(e).__name__
for name, path in (("ledger folder", os.path.join(os.path.dirname(secrets["ledger"]), "planted")),
                   ("own tree", os.path.join(a[6], "kernels", "planted.py"))):
    try:
        open(path, "w").write("x")
        out["wrote " + name] = "wrote"
    except OSError as e:
        out["wrote " + name] = type(e).__name__
res = a[a.index("--out") + 1]
open(os.path.join(os.environ["TMPDIR"], "scratch"), "w").write("mine")  # its private /tmp
open(res, "w").write(json.dumps(out))
print(json.dumps(out))
"""


# the probe needs only the standard library: the system's Python, which nobody reaches (this
# machine's own Python lies in root's home, 0700: kern doctor's user sandbox names that)
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(S._probe_user() != "", reason=f"sides cannot start as {C.SANDBOX_USER} here: {S._probe_user()}")
@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON) or C.blocked(os.path.realpath(SYSTEM_PYTHON), lambda p: os.stat(p).st_mode) != "",
                    reason=f"no {SYSTEM_PYTHON} that others may run")
def test_a_side_as_the_sandbox_user_reads_no_secret_reaches_no_listener_and_writes_its_result(monkeypatch):
    """``sandbox: user`` forced on this machine (root, ``nobody`` exists): a side-like process
    started as the gates start a tap side cannot read a 0600 file of root's home nor a secret
    planted (0644) in the ledger's folder, cannot list runs/, open a TCP or UDP socket to the
    listeners on 127.0.0.1 or read the launcher's environment, writes neither the ledger's
    folder nor its tree, and still writes its result, which is the launcher's afterwards."""
    import pwd
    import shutil
    import stat
    import tempfile
    import uuid

    token = uuid.uuid4().hex[:12]
    base = Path(tempfile.mkdtemp(prefix="kern-user-sandbox-", dir="/tmp"))
    base.chmod(0o711)  # pytest's own tmp folders are root's alone: nobody could reach nothing
    root_secret = Path(pwd.getpwuid(0).pw_dir) / f".kern-user-secret-{token}"
    listener = Listener()
    try:
        repo = base / "repo"
        runs, tree, run = repo / "runs", repo / "runs" / "worktrees" / "cand", repo / "runs" / "tap" / "b"
        (tree / "kernels").mkdir(parents=True)
        run.mkdir(parents=True)
        (repo / "kern.yaml").write_text("sandbox: user\n")
        (runs / "ledger.sqlite").write_text("SECRET-LEDGER")
        (runs / f"kern-secret-{token}").write_text("SECRET-PLANTED")
        (runs / f"kern-secret-{token}").chmod(0o644)
        root_secret.write_text("SECRET-HOME")
        root_secret.chmod(0o600)
        secrets = {"home": str(root_secret), "ledger": str(runs / "ledger.sqlite"),
                   "planted": str(runs / f"kern-secret-{token}"), "shadow": "/etc/shadow"}
        monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_ENV)  # what the loop's own process holds
        cmd = [SYSTEM_PYTHON, "-c", USER_PROBE, json.dumps(secrets), str(listener.port),
               str(listener.udp_port), str(os.getpid()), str(runs / "tap"), str(tree),
               "gates.side.driver", "tap", "--tree", str(tree), "--out", str(run / "out.json")]
        wrapped = S.wrap(cmd, Placement(sandbox="user"))
        r = subprocess.run(wrapped, capture_output=True, text=True, timeout=120, cwd=S.HARNESS_ROOT,
                           env={**side_env(Placement()), "ANTHROPIC_API_KEY": SECRET_ENV})
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout.strip().splitlines()[-1])
        nobody = pwd.getpwnam(C.SANDBOX_USER)
        assert got["uid"] == nobody.pw_uid and got["groups"] == [], got
        for name in ("home", "ledger", "planted", "shadow", "list runs", "list tap"):
            assert got[name] == "PermissionError", (name, got)
        assert got["net"] == got["udp"] == "PermissionError", got  # the seccomp filter
        assert listener.got == []
        assert got["launcher environ"] == "PermissionError", got
        assert "ANTHROPIC_API_KEY" not in got["env"] and set(got["env"]) <= {
            *C.ENV_KEEP, "HOME", "TMPDIR", "TRITON_CACHE_DIR"}, got["env"]
        assert got["wrote ledger folder"] == got["wrote own tree"] == "PermissionError", got
        # its result is there, the launcher's; its folder is the launcher's alone again, its
        # private home and /tmp are gone
        result = run / "out.json"
        assert json.loads(result.read_text())["uid"] == nobody.pw_uid
        assert result.stat().st_uid == os.getuid() and run.stat().st_uid == os.getuid()
        assert stat.S_IMODE(run.stat().st_mode) == 0o700
        assert sorted(p.name for p in run.iterdir()) == ["out.json"]
        # what the gates set in the ledger's folder: searched, not listed; its files the owner's
        assert stat.S_IMODE(runs.stat().st_mode) == 0o711
        assert stat.S_IMODE((runs / "ledger.sqlite").stat().st_mode) == 0o600
        assert not (runs / "planted").exists() and not (tree / "kernels" / "planted.py").exists()
    finally:
        listener.close()
        root_secret.unlink(missing_ok=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="root's chmod of a test folder")
def test_a_folder_the_sandbox_user_cannot_search_is_refused_with_the_operators_fix(tmp_path):
    """Outside the ledger's folder kern widens nothing: a side whose interpreter or folders
    lie beyond a folder others may not search is refused before it starts, naming the folder,
    its mode and the fix."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="kern-user-sandbox-", dir="/tmp"))
    base.chmod(0o711)
    try:
        (base / "closed").mkdir(mode=0o700)
        python = base / "closed" / "python3"
        python.write_text("")
        side = C.side_of(["gates.side.driver", "tap", "--tree", str(base), "--out", str(base / "run" / "o.json")], None)
        with pytest.raises(C.SandboxUnavailable) as e:
            S.open_way(side, S.machine(), str(python))
        assert f"{base / 'closed'} is mode 0o700 (expected others may search it, o+x)" in str(e.value)
        assert f"operator: `chmod o+x {base / 'closed'}`" in str(e.value)
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


THREAD_NAMER = r"""
import os, sys, threading
# what glibc's pthread_setname_np does for a thread other than the caller, and what CUDA's
# cuInit does for the threads it starts (refused: cuInit fails with error 304)
done = threading.Event(); tid = []
t = threading.Thread(target=lambda: (tid.append(threading.get_native_id()), done.wait(30)))
t.start()
while not tid:
    pass
with open(f"/proc/self/task/{tid[0]}/comm", "w") as f:
    f.write("kern-named")
name = open(f"/proc/self/task/{tid[0]}/comm").read().strip()
done.set(); t.join()
print(name)
"""


@needs_sandbox
@pytest.mark.parametrize("mechanism", ["namespaces", "landlock"])
def test_a_confined_process_names_its_own_threads_as_cuda_does(tmp_path, home, mechanism):
    """CUDA writes /proc/self/task/<tid>/comm at cuInit: a side that may not write there has no
    GPU (seen on the H200, 2026-12-04). The side may write its own /proc entries."""
    if mechanism == "namespaces" and S.facts().namespaces:
        pytest.skip(S.facts().namespaces)
    tree, run = tmp_path / "runs" / "worktrees" / "cand", tmp_path / "runs" / "tap" / "b"
    (tree / "kernels").mkdir(parents=True)
    run.mkdir(parents=True)
    side_cmd = [sys.executable, "-c", THREAD_NAMER,
                "gates.side.driver", "tap", "--tree", str(tree), "--out", str(run / "out.json")]
    cmd = S.wrap(side_cmd, Placement(sandbox=mechanism))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=S.HARNESS_ROOT,
                       env=side_env(Placement()))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "kern-named"
