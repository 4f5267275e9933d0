"""The sandbox's mechanism: the shell that starts every side process confined (its policy, which
mechanism and what a side may see, write and reach, is gates/rules/confinement.py's, pure;
design.md: "Candidate code is untrusted"; docs/sandbox.md says what it closes and what not).

Every side (main's and the candidate's: tap, bench, store, step and profile sides) starts
through :func:`wrap`, which puts ``gates/side/confine.py`` in front of its command with the
side's plan (``confinement.plan``), after gathering this machine's facts (:func:`machine`,
:func:`facts`: probed once per process). The Triton cache is a copy of main's compiled kernels
(the request's ``Placement.seed``, gates/launch/compiled.py; :func:`fresh_cache`) made before
the side starts and removed when it ends, under every mechanism and ``off`` too: nothing a side writes there is read by another.
Processes that must talk to each other (the ranks of one side; the model store and the bench
sides that attach to it) share one sandbox: :func:`group`, started by a holder process.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..requests import Placement
from ..rules.confinement import (COMPILE_MODE, SANDBOX_USER, ConfinedSide, Facts, Machine, SandboxUnavailable,
                                 blocked, choose, held_plan, inside, moved_group, plan, side_of, staged)
from ..rules.shm import ShmEntry, ShmSweep, swept

HARNESS_ROOT = Path(__file__).resolve().parents[2]
CONFINE = str(HARNESS_ROOT / "gates" / "side" / "confine.py")


def copy_cache(src: str, dst: str, known_as: str | None = None) -> int:
    """Copy the regular files of the Triton cache ``src`` into ``dst`` as new files (new
    inodes, the copier's, default modes: a side writing its copy changes nothing of
    ``src``; a hard link would share the inode); links and anything but files and folders
    are left out. Triton's group files name their members by absolute path (triton 3.6 and
    3.9: ``__grp__<name>.json``, ``{"child_paths": {file: path}}``): they are rewritten to
    the copies (at ``known_as``, where the copy is renamed to that), and a member outside
    ``src`` is dropped. Returns the bytes copied."""
    import stat as st

    copied = 0
    for root, dirs, files in os.walk(src, followlinks=False):
        rel = os.path.relpath(root, src)
        os.makedirs(os.path.normpath(os.path.join(dst, rel)), exist_ok=True)
        for name in files:
            path, to = os.path.join(root, name), os.path.normpath(os.path.join(dst, rel, name))
            if not st.S_ISREG(os.lstat(path).st_mode):
                continue
            group = moved_group(Path(path).read_text(errors="replace"), (src, os.path.realpath(src)),
                                known_as or dst) \
                if name.startswith("__grp__") and name.endswith(".json") else None
            if group is None:
                shutil.copyfile(path, to, follow_symlinks=False)
            else:
                Path(to).write_text(group)
            copied += os.path.getsize(path)
    return copied


def fresh_cache(side: ConfinedSide, seed: str | None) -> None:
    """The side's Triton cache, new before it starts: whatever a process of the same name
    left there (one killed before its sandbox removed it) is removed, then ``seed`` copied
    in (a compile side's seed is an ancestor main's compiled cache, or none:
    gates/launch/compiled.py chooses)."""
    shutil.rmtree(side.triton_cache, ignore_errors=True)
    if seed and os.path.isdir(seed):
        copy_cache(seed, side.triton_cache)
    os.makedirs(side.triton_cache, exist_ok=True)


def machine(env: dict | None = None) -> Machine:
    """This machine's facts for a plan (``env``: the side's environment)."""
    import site

    env = dict(os.environ if env is None else env)
    home = os.path.realpath(env.get("HOME") or os.path.expanduser("~"))
    real = os.path.realpath(sys.executable)
    py = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
          os.path.dirname(os.path.dirname(real))]
    for d in [*site.getsitepackages(), site.getusersitepackages()]:
        if os.path.isdir(d):
            py.append(d)
            py += _pth_dirs(d)
    libs = [env.get("CUDA_HOME", "")] + env.get("LD_LIBRARY_PATH", "").split(":") + _ld_dirs() + \
        [p for p in env.get("PYTHONPATH", "").split(":") if os.path.realpath(p) != str(HARNESS_ROOT)]
    devices = sorted(glob.glob("/dev/nvidia*"))
    return Machine(os.getuid(), os.getgid(), home,
                   tuple(dict.fromkeys(os.path.realpath(p) for p in py if p)), str(HARNESS_ROOT),
                   tuple(dict.fromkeys(os.path.realpath(p) for p in libs if p and os.path.exists(p))),
                   tuple(devices), user=_user_ids())


def _user_ids() -> tuple:
    import pwd

    try:
        u = pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        return ()
    return (SANDBOX_USER, u.pw_uid, u.pw_gid)


def _ld_dirs() -> list[str]:
    """The folders the dynamic linker's cache names (/etc/ld.so.conf.d): where a driver's
    libraries may lie outside /usr (libcuda in a container's /usr/local/nvidia/lib64)."""
    out = []
    for conf in ["/etc/ld.so.conf", *sorted(glob.glob("/etc/ld.so.conf.d/*.conf"))]:
        try:
            lines = Path(conf).read_text().splitlines()
        except OSError:
            continue
        out += [ln.strip() for ln in lines if ln.strip().startswith("/") and os.path.isdir(ln.strip())]
    return out


def _pth_dirs(site_dir: str) -> list[str]:
    """Folders the ``.pth`` files of a site add to ``sys.path`` (editable installs), except a
    kern repository's root (its runs/ holds the ledger): the harness comes from PYTHONPATH."""
    out = []
    for pth in glob.glob(os.path.join(site_dir, "*.pth")):
        try:
            lines = Path(pth).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            p = line.strip()
            if p.startswith("/") and os.path.isdir(p) and not os.path.exists(os.path.join(p, "kern.yaml")):
                out.append(p)
    return out


def _probe_namespaces() -> str:
    """Start a trivial sandboxed Python as a side would be: "" when it ran in a PID namespace
    of its own, else why not."""
    with tempfile.TemporaryDirectory(prefix="kern-sandbox-probe-") as d:
        tree = os.path.join(d, "tree")
        os.makedirs(os.path.join(tree, "kernels"))
        side = ConfinedSide("tap", tree, os.path.join(d, "run", "out.json"))
        os.makedirs(side.run_dir)
        p = plan("namespaces", side, machine(), landlock_abi=0)
        cmd = [sys.executable, "-I", "-S", CONFINE, "run", json.dumps(p), "--", sys.executable,
               "-I", "-S", "-c", "import os; print(os.getpid(), sorted(n for n in os.listdir('/proc') if n.isdigit()))"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"the probe did not run ({e})"
        if r.returncode != 0:
            words = [ln for ln in r.stderr.splitlines() if ln.strip()]
            return words[-1][:300] if words else f"exit {r.returncode}"
        if not r.stdout.startswith("2 ['1', '2']"):
            return f"the probe's process did not run alone in its PID namespace ({r.stdout.strip()[:200]})"
        return ""


def _probe_landlock() -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, int(libc.syscall(444, None, 0, 1)))


def _probe_user() -> str:
    """"" when this process may start sides as SANDBOX_USER, else why not."""
    if os.geteuid() != 0:
        return f"the launcher is not root (uid {os.geteuid()}): only root starts a process as another user"
    ids = _user_ids()
    if not ids:
        return f"no user {SANDBOX_USER!r} on this machine"
    if 0 in ids[1:]:
        return f"the user {SANDBOX_USER!r} is uid/gid 0 here"
    return ""


@lru_cache(maxsize=1)
def facts() -> Facts:
    """What this machine allows, probed once per process (about 0.1 s)."""
    if sys.platform != "linux":
        return Facts(f"not Linux ({sys.platform})", 0, f"not Linux ({sys.platform})")
    return Facts(_probe_namespaces(), _probe_landlock(), _probe_user())


def chosen(mode: str) -> str:
    """The mechanism sides get on this machine under kern.yaml's ``sandbox`` ``mode``."""
    return "off" if mode == "off" else choose(mode, facts())


def _spec_of(cmd: list[str]) -> dict | None:
    try:
        path = cmd[cmd.index("--spec") + 1]
        return json.loads(Path(path).read_text()) if path.endswith(".json") else json.loads(path)
    except (ValueError, IndexError, OSError):
        return None


def _confine(verb: str, *args: str) -> list[str]:
    return [sys.executable, "-I", "-S", CONFINE, verb, *args]


def wrap(cmd: list[str], place: Placement, group: "Group | None" = None, env: dict | None = None) -> list[str]:
    """``cmd`` (a ``gates.side.driver`` command line) as it must start at ``place``: in the
    sandbox of ``place.sandbox``, joining ``group``'s where one is given; with ``sandbox: off``
    confined in nothing but its Triton cache. Its private Triton cache is made first, a copy of
    ``place.seed`` (:func:`fresh_cache`)."""
    mech = chosen(place.sandbox)
    side = side_of(cmd, _spec_of(cmd))
    m = machine(env)
    fresh_cache(side, place.seed)
    g = group
    if g is not None:
        g.join(side)  # admitted, and its folders known to the group's close
    if mech == "off":
        return _confine("run", json.dumps(plan("off", side, m, g.sides if g is not None else None)),
                        "--", *cmd)
    _prepare(side, m, cmd)
    cmd = staged(cmd, side)
    abi = facts().landlock_abi
    if g is not None and mech == "namespaces":
        held = g.held(m)
        p = plan(mech, side, m, g.sides, g.peers, abi, shm=g.shm)
        return _confine("join", json.dumps(p), json.dumps(held), "--", *cmd)
    if mech == "user":
        open_way(side, m, cmd[0])
        if g is not None:
            g.mechanism = "user"
    p = plan(mech, side, m, g.sides if g is not None else None, g.peers if g is not None else False, abi)
    p["remove_stage"] = g is None  # a group's stage goes when the group closes
    p["give_back"] = g is None  # a group's folders are given back when the group closes
    for d in p.get("make", ()):
        os.makedirs(d, exist_ok=True)
    for link, target in p.get("links", ()):
        if not os.path.islink(link):
            os.symlink(target, link)
    return _confine("run", json.dumps(p), "--", *cmd)


def ledger_folder(path: str) -> str:
    """The kern repository's runs/ (the ledger's folder) ``path`` lies in, "" when none."""
    for a in Path(path).parents:
        if a.name == "runs" and ((a / "ledger.sqlite").exists() or (a.parent / "kern.yaml").exists()):
            return str(a)
    return ""


def open_way(side: ConfinedSide, m: Machine, python: str = sys.executable) -> None:
    """Under ``user``: what the side reads and writes reachable by that user, nothing more of
    the ledger's folder. In a repository's runs/ the gates set the modes themselves: every
    folder on the way 0711 (searched, not listed), every file directly in runs/ (the ledger, its
    journal, locks, anything put there) the owner's alone; outside it a folder that others may
    not search is the operator's to open (kern never widens a folder it does not own).
    ``python``: the side's interpreter (its own folders are checked, not its library's)."""
    import stat as st

    need = [side.writes, os.path.join(side.tree, "kernels"), os.path.join(m.harness, "gates"),
            os.path.realpath(shutil.which(python) or python), *side.readonly]
    if os.path.isdir(side.triton_cache):  # made by fresh_cache before the side starts
        need.append(side.triton_cache)
    runs = {ledger_folder(p) for p in need} - {""}
    for folder in runs:
        for e in os.scandir(folder):
            s = e.stat(follow_symlinks=False)
            if not st.S_ISDIR(s.st_mode) and not st.S_ISLNK(s.st_mode) and s.st_mode & 0o077 \
                    and s.st_uid == os.geteuid():
                os.chmod(e.path, st.S_IMODE(s.st_mode) & 0o700)

    def mode_of(folder: str) -> int:
        s = os.stat(folder)
        mode = st.S_IMODE(s.st_mode)
        if any(inside(folder, r) for r in runs) and s.st_uid == os.geteuid():
            want = (mode & ~0o066) | 0o011  # searched, not listed, by the group and others
            if want != mode:
                os.chmod(folder, want)
            return want
        return mode

    for p in need:
        stop = blocked(p, mode_of)
        if stop:
            raise SandboxUnavailable(
                f"sandbox: user: {SANDBOX_USER} cannot reach {p}: {stop} is mode "
                f"{oct(os.stat(stop).st_mode & 0o7777)} (expected others may search it, o+x); fix: "
                f"operator: `chmod o+x {stop}`, or keep the repository, the harness and Python "
                f"where others may reach them (not in root's home)")


_COMPILED: set = set()


def _compiled(folder: str) -> None:
    """Python's bytecode of ``folder`` written once by this process: a side cannot write
    ``__pycache__`` in its read-only tree and gates/ (nor should it: a candidate's side would
    leave bytecode that main's sides load), so without this every side compiles them again.
    Compiling runs none of the code."""
    if folder not in _COMPILED:
        import compileall

        compileall.compile_dir(folder, quiet=2, workers=1)
        _COMPILED.add(folder)


def _prepare(side: ConfinedSide, m: Machine, cmd: list[str] | None = None) -> None:
    """The folders a plan binds that may not exist yet; a run side's spec copied to its stage;
    the bytecode of the code it imports."""
    for folder in (os.path.join(m.harness, "gates"), os.path.join(side.tree, "kernels")):
        if os.path.isdir(folder):
            _compiled(folder)
    os.makedirs(side.run_dir, exist_ok=True)
    os.makedirs(side.writes, exist_ok=True)
    os.makedirs(side.cache_area, exist_ok=True)
    if cmd and not side.own_folder and "--spec" in cmd:
        spec = cmd[cmd.index("--spec") + 1]
        if spec.endswith(".json") and os.path.exists(spec):
            shutil.copyfile(spec, os.path.join(side.stage, os.path.basename(spec)))


def erase(path: str) -> bool:
    """Remove the folder ``path`` and everything beneath it, whatever its modes and depth (a
    sandboxed process may leave a folder it made unreadable, or nested deeper than a recursion
    or a path reaches): each folder is made the owner's (0700) and its folders are moved up into
    ``path`` before it is removed, so no more than two folders are open at once and no path
    grows. Never follows a link (a folder is what lstat says is one). True once it is gone;
    False where something of it could not be removed (what stays is left)."""
    import stat as st

    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        if not st.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return True
        os.chmod(path, 0o700)
        top = os.open(path, flags)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    moved = 0

    def free_name() -> str:
        nonlocal moved
        while True:
            moved += 1
            try:
                os.stat(f"{moved}.kern-erase", dir_fd=top, follow_symlinks=False)
            except FileNotFoundError:
                return f"{moved}.kern-erase"

    try:
        while True:
            names = os.listdir(top)
            if not names:
                break
            for name in names:
                if not st.S_ISDIR(os.stat(name, dir_fd=top, follow_symlinks=False).st_mode):
                    os.unlink(name, dir_fd=top)
                    continue
                os.chmod(name, 0o700, dir_fd=top)  # a folder, no link: it is its owner's again
                sub = os.open(name, flags, dir_fd=top)
                try:
                    for child in os.listdir(sub):
                        if st.S_ISDIR(os.stat(child, dir_fd=sub, follow_symlinks=False).st_mode):
                            # moving a folder to another parent writes its "..": its owner's first
                            os.chmod(child, 0o700, dir_fd=sub)
                            os.rename(child, free_name(), src_dir_fd=sub, dst_dir_fd=top)
                        else:
                            os.unlink(child, dir_fd=sub)
                finally:
                    os.close(sub)
                os.rmdir(name, dir_fd=top)
    except OSError:
        return False
    finally:
        os.close(top)
    try:
        os.rmdir(path)
    except OSError:
        return False
    return True


@dataclass
class Group:
    """One sandbox's namespaces (user, PID, IPC, network) for several processes
    (:func:`group`): started by a ``hold`` process the first time a side joins it (:func:`wrap`
    with it), ended by :meth:`close`. Each member builds its root from its own plan (its tree,
    its run folder, its Triton cache) and shares the group's /dev/shm (:attr:`shm`), so any
    side may join a held group, whatever its tree or run folder, as long as it lives: the
    model store's outlives judgments. ``sides``: the sides it was opened for and every side
    that joined since; ``peers``: one side's ranks (no landlock between them), which admits
    only that side's processes."""
    sides: list
    peers: bool
    mechanism: str = ""  # "user" once a side joined under it: its folders are given back at close
    shm: str | None = None  # the group's /dev/shm on the machine (namespaces), made with its holder
    _holder: subprocess.Popen | None = None
    _held: dict | None = None

    def admits(self, side: ConfinedSide) -> None:
        """Ranks of one side meet without landlock between them: no other side joins them.
        A group of sides that are not peers (the model store's) admits any side, each in its
        own root and its own landlock domain."""
        if self.peers and self.sides and not any(side.tree == s.tree and side.writes == s.writes
                                                 for s in self.sides[:1]):
            raise ValueError(f"sandbox: the side {side.out} (tree {side.tree}) is not a rank of the "
                             f"side its group was opened for ({self.sides[0].out}): ranks meet "
                             f"without landlock, no other side may join them (a bug of the launcher)")

    def join(self, side: ConfinedSide) -> None:
        """``side`` is about to join (:meth:`admits` it first): the group knows its folders."""
        self.admits(side)
        if side not in self.sides:
            self.sides.append(side)

    def held(self, m: Machine) -> dict:
        """The ids of the group's namespaces, started now if they are not yet."""
        if self._held is None:
            self.shm = tempfile.mkdtemp(prefix="kern-group-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
            self._holder = subprocess.Popen(_confine("hold", json.dumps(held_plan(m))), stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            start_new_session=True)
            line = self._holder.stdout.readline()
            if not line:
                err = self._holder.stderr.read().decode(errors="replace").strip()
                self._holder.wait()
                self._holder = None
                shutil.rmtree(self.shm, ignore_errors=True)
                self.shm = None
                raise SandboxUnavailable(f"sandbox: the group's sandbox did not start: {err[-400:]}")
            self._held = json.loads(line)
        return self._held

    def sweep_shm(self, keep: frozenset) -> ShmSweep | None:
        """Remove every entry of the group's /dev/shm but the files ``keep`` names by (name,
        inode) (gates/rules/shm.py's :func:`~gates.rules.shm.swept`), from the machine's side:
        once a lease's sides ended, what one left there reaches no later side. None where the
        group has no /dev/shm of its own (not under namespaces, or not started)."""
        import stat as st

        if self.shm is None:
            return None
        listing = []
        try:
            os.chmod(self.shm, 0o700)  # a member may have changed its mode (it owns it in there)
            with os.scandir(self.shm) as entries:
                for e in entries:
                    s = e.stat(follow_symlinks=False)
                    listing.append(ShmEntry(e.name, s.st_ino, st.S_ISDIR(s.st_mode)))
        except OSError:
            return ShmSweep((), (".",))  # the folder itself could not be listed: nothing is known swept
        removed, left = [], []
        for e in swept(listing, keep):
            (removed if erase(os.path.join(self.shm, e.name)) else left).append(e.name)
        return ShmSweep(tuple(removed), tuple(left))

    @property
    def alive(self) -> bool:
        """Its holder runs (or none was started yet)."""
        return self._holder is None or self._holder.poll() is None

    def close(self) -> None:
        """End the group's sandbox (its processes must have ended: whatever is left dies), its
        /dev/shm and its run sides' stages (each side handed its documents back when it ended)."""
        if self._holder is not None:
            try:
                self._holder.stdin.close()
                self._holder.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._holder.kill()
                self._holder.wait()
            self._holder = None
            self._held = None
        if self.shm is not None:
            erase(self.shm)  # whatever a member left there, of any mode or depth
            self.shm = None
        if self.mechanism == "user":
            from gates.side.confine import own_tree

            for s in self.sides:  # the launcher's again, 0700: no later side enters them
                own_tree(s.writes, os.getuid(), os.getgid())
        for s in self.sides:
            if not s.own_folder:
                shutil.rmtree(s.stage, ignore_errors=True)
            if s.mode != COMPILE_MODE:
                try:  # its members' caches went with them
                    os.rmdir(s.cache_area)
                except OSError:
                    pass


def side_group(mode: str, tree, out, spec: dict | None = None, peers: bool = True,
               more=()) -> Group:
    """A group for the sides started as ``gates.side.driver MODE --tree TREE --out OUT`` with
    ``spec`` (``more``: further (mode, tree, out) triples, e.g. the bench's other tree)."""
    def one(md, t, o, sp=None):
        return side_of(["gates.side.driver", md, "--tree", str(t), "--out", str(o)], sp)

    return Group([one(mode, tree, out, spec)] + [one(*x) for x in more], peers)


@contextmanager
def group(mode: str, tree, out, spec: dict | None = None, peers: bool = True, more=()):
    """A :func:`side_group` for the block (sides join it through ``wrap``'s ``group``; with
    ``sandbox: off`` or landlock alone each side is confined by itself), closed after it."""
    g = side_group(mode, tree, out, spec, peers, more)
    try:
        yield g
    finally:
        g.close()
