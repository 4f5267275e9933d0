"""The candidate's sandbox: what a side process may see, write and reach (design.md:
"Candidate code is untrusted"; docs/sandbox.md says what it closes and what it does not).

Every side (main's and the candidate's: tap, bench, store, step and profile sides) starts
through :func:`wrap`, which puts ``gates/side/confine.py`` in front of its command with a
*plan*: the file system it sees (an allow-list: the system's programs and libraries, Python,
the harness's ``gates/``, its tree's ``kernels/``, its own run folder writable, a private
``/tmp``, home and Triton cache; nothing else of the machine exists there: no home, no ledger,
no other run's or worktree's files, no main's recording, no other side's Triton cache), no
network, and the GPU's device nodes. The Triton cache is a copy of main's compiled kernels
(:func:`seeded`, gates/compiled.py) made before the side starts and removed when it ends,
under every mechanism and ``off`` too: nothing a side writes there is read by another.

Mechanisms, strongest first (:data:`MECHANISMS`): ``namespaces`` (user, mount, network, PID
and IPC namespaces; landlock on top where the kernel has it), ``landlock`` alone (the same
allow-list as path rules, TCP refused; no mount or network namespace) and ``user`` (neither:
the side drops to the unprivileged :data:`SANDBOX_USER` under a seccomp socket filter; what it
reads is then decided by file permissions alone, docs/sandbox.md). kern.yaml's
``sandbox`` (:data:`MODES`) picks one, ``auto`` the strongest this machine allows (probed
once per process: :func:`facts`), ``off`` none. Processes that must talk to each other (the
ranks of one side; the model store and the bench sides that attach to it) share one sandbox:
:func:`group`.

Pure decisions first (:func:`choose`, :func:`side_of`, :func:`plan`), then the thin shell
that gathers facts and starts holders.
"""
from __future__ import annotations

import contextvars
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

MODES = ("auto", "namespaces", "landlock", "user", "off")
MECHANISMS = ("namespaces", "landlock", "user")
# the unprivileged user of the ``user`` mechanism: fixed, not a kern.yaml key (it exists on
# every Debian and RHEL; a dedicated user would be stronger: docs/sandbox.md)
SANDBOX_USER = "nobody"
# what a side under ``user`` keeps of the environment it was started with (gates/launch.py's
# side_env and a rank's variables; a test holds them): nothing else of the launcher's
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "NCCL_NVLS_ENABLE",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "CUDA_HOME", "LD_LIBRARY_PATH",
            "VIRTUAL_ENV", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "OMP_NUM_THREADS",
            "KERN_SIDE_MEMORY_BYTES", "KERN_SIDE_EXPECTS_CUDA", "RANK", "WORLD_SIZE", "LOCAL_RANK",
            "MASTER_ADDR", "MASTER_PORT")
CONFINE = str(Path(__file__).resolve().parent / "side" / "confine.py")
HARNESS_ROOT = Path(__file__).resolve().parent.parent

# what a side reads of the system; everything else of the machine is absent (namespaces) or
# refused (landlock)
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
ETC = ("passwd", "group", "nsswitch.conf", "hosts", "host.conf", "localtime", "timezone",
       "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "os-release",
       "debian_version", "lsb-release", "mime.types", "gai.conf", "nvidia")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
# what a side reads of /proc under landlock alone (no PID namespace): its own entries and the
# machine's facts, never another process's (/proc/<pid>/environ holds the launcher's API keys,
# and landlock refuses only ptrace-attach reads such as /proc/<pid>/mem)
PROC = ("/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/loadavg",
        "/proc/version", "/proc/filesystems", "/proc/devices", "/proc/sys", "/proc/driver")
# modes whose --out folder the gates made for the side alone; a run (step) side's --out may be
# any file (kern step --out ./x.json), so it writes into a stage beside it instead and only its
# documents are moved out when it ends
OWN_FOLDER_MODES = ("tap", "bench", "store", "compile")
# the side that compiles main's kernels (gates/compiled.py): its Triton cache is the one it
# builds, in its run folder (COMPILED_CACHE), kept when it ends for the harness to install
COMPILE_MODE = "compile"
COMPILED_CACHE = "triton"


class SandboxUnavailable(RuntimeError):
    """kern.yaml asks for a sandbox this machine cannot give (the operator or the user acts)."""


# ------------------------------------------------------------------ decisions (pure)
@dataclass(frozen=True)
class Facts:
    """What this machine allows (:func:`facts` probes it)."""
    namespaces: str  # "" when a namespace sandbox started here, else why not
    landlock_abi: int  # 0: none
    user: str = "not probed"  # "" when sides can be started as SANDBOX_USER here, else why not

    def describe(self, mechanism: str) -> str:
        if mechanism == "off":
            return "off (kern.yaml sandbox: off): candidate code runs with the user's rights"
        if mechanism == "namespaces":
            ll = f" + landlock ABI {self.landlock_abi}" if self.landlock_abi else " (no landlock)"
            return f"namespaces (user, mount, network, PID, IPC){ll}"
        if mechanism == "user":
            return (f"user {SANDBOX_USER} + seccomp (no network) — file permissions only: whatever "
                    f"others may read stays readable to candidate code (no namespaces: "
                    f"{self.namespaces}; landlock: {'ABI %d' % self.landlock_abi if self.landlock_abi else 'none'})")
        return f"landlock ABI {self.landlock_abi} (no namespaces: {self.namespaces})"


def fix_text() -> str:
    return ("operator: allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0, "
            "kernel.unprivileged_userns_clone=1, no AppArmor userns restriction) or boot a kernel "
            f"with landlock, or run kern as root where the user `{SANDBOX_USER}` exists (`sandbox: "
            "user`, the weakest: file permissions only); or user: set `sandbox: off` in kern.yaml "
            "to run candidate code with your rights (it can then read your files and use the network)")


def choose(mode: str, f: Facts) -> str:
    """The mechanism kern.yaml's ``sandbox`` gets on this machine, or :class:`SandboxUnavailable`
    naming the fix."""
    if mode not in MODES:
        raise SandboxUnavailable(f"sandbox: expected one of {', '.join(MODES)}, found {mode!r}")
    if mode == "off":
        return "off"
    ns_ok, ll_ok, user_ok = not f.namespaces, f.landlock_abi >= 1, not f.user
    if mode == "namespaces" and not ns_ok:
        raise SandboxUnavailable(f"sandbox: namespaces asked for, but none could be made here "
                                 f"({f.namespaces}); fix: {fix_text()}")
    if mode == "landlock" and not ll_ok:
        raise SandboxUnavailable(f"sandbox: landlock asked for, but this kernel has none; fix: "
                                 f"{fix_text()}")
    if mode == "user" and not user_ok:
        raise SandboxUnavailable(f"sandbox: user asked for, but sides cannot be started as "
                                 f"{SANDBOX_USER!r} here ({f.user}); fix: {fix_text()}")
    if mode == "auto":
        if ns_ok:
            return "namespaces"
        if ll_ok:
            return "landlock"
        if user_ok:
            return "user"
        raise SandboxUnavailable(f"sandbox: none available on this machine (namespaces: "
                                 f"{f.namespaces}; landlock: not in this kernel; user "
                                 f"{SANDBOX_USER}: {f.user}); fix: {fix_text()}")
    return mode


@dataclass(frozen=True)
class ConfinedSide:
    """What one side process needs, read off its command line (and spec)."""
    mode: str
    tree: str  # the revision's tree (only its kernels/ is shown)
    out: str  # its --out document, as the launcher named it
    readonly: tuple[str, ...] = ()  # folders inside its run folder it may only read

    @property
    def run_dir(self) -> str:
        return os.path.dirname(self.out)

    @property
    def own_folder(self) -> bool:
        return self.mode in OWN_FOLDER_MODES

    @property
    def stage(self) -> str:
        """Where a run side writes instead of its --out folder (every rank of one side the
        same folder); the gates move its documents out when it ends."""
        stem = re.sub(r"\.rank\d+$", "", Path(self.out).stem)
        return os.path.join(self.run_dir, f".sandbox-{stem}")

    @property
    def writes(self) -> str:
        return self.run_dir if self.own_folder else self.stage

    @property
    def private(self) -> str:
        """Its own folder of private things (home and /tmp, as the mechanism needs), removed
        when it ends; one per process (a rank's ``--out`` names its rank)."""
        return os.path.join(self.writes, f".sandbox-{Path(self.out).stem}")

    @property
    def cache_area(self) -> str:
        """Where the private Triton caches of the sides writing one folder lie: beside that
        folder, never in it. Sides share a run folder (the scorer's store and bench sides,
        main's and the candidate's at once), so a cache in it would be the others' to write:
        the candidate's side could change main's kernels while main's side loads them."""
        if self.mode == COMPILE_MODE:
            return self.run_dir
        return os.path.join(os.path.dirname(self.writes), ".triton-" + os.path.basename(self.writes).lstrip("."))

    @property
    def triton_cache(self) -> str:
        """The Triton cache it writes: its own (a copy of main's compiled kernels, removed
        when it ends; one per process), but a compile side's, which is the cache it builds
        for main, in its run folder."""
        if self.mode == COMPILE_MODE:
            return os.path.join(self.run_dir, COMPILED_CACHE)
        return os.path.join(self.cache_area, Path(self.out).stem)

    @property
    def outputs(self) -> str:
        """The names a run side's stage may hand back (its document, its ranks', partials)."""
        stem = re.sub(r"\.rank\d+$", "", Path(self.out).stem)
        return rf"^{re.escape(stem)}(\.rank\d+)?(\.partial)?\.json$"


def side_of(cmd: list[str], spec: dict | None) -> ConfinedSide:
    """The side a ``gates.side.driver`` command line starts (pure; ``spec``: its spec file's
    content). The accuracy gate's replay may only read main's recording (``record``)."""
    try:
        i = cmd.index("gates.side.driver")
        mode = cmd[i + 1]
        tree, out = cmd[cmd.index("--tree") + 1], cmd[cmd.index("--out") + 1]
    except (ValueError, IndexError):
        raise ValueError(f"sandbox: expected a gates.side.driver command line with --tree and "
                         f"--out, got {cmd!r}: a bug of the launcher") from None
    record = (spec or {}).get("record")
    return ConfinedSide(mode, os.path.abspath(tree), os.path.abspath(out),
                (os.path.abspath(record),) if record else ())


def staged(cmd: list[str], side: ConfinedSide) -> list[str]:
    """A run side's command line writing into its stage: ``--out`` there, ``--spec`` the copy
    the launcher puts there (pure)."""
    if side.own_folder:
        return list(cmd)
    out = list(cmd)
    i = out.index("--out") + 1
    out[i] = os.path.join(side.stage, os.path.basename(side.out))
    if "--spec" in out:
        j = out.index("--spec") + 1
        if out[j].endswith(".json"):
            out[j] = os.path.join(side.stage, os.path.basename(out[j]))
    return out


@dataclass(frozen=True)
class Machine:
    """The facts of this machine and process a plan names (:func:`machine` gathers them)."""
    uid: int
    gid: int
    home: str
    python: tuple[str, ...]  # Python's prefixes and whatever its site paths add
    libraries: tuple[str, ...] = ()  # CUDA_HOME, LD_LIBRARY_PATH, PYTHONPATH entries
    devices: tuple[str, ...] = ()  # the GPU's device nodes present here
    harness: str = str(HARNESS_ROOT)
    user: tuple = ()  # (name, uid, gid) of SANDBOX_USER where it exists
    python_version: str = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def readable(sides: list[ConfinedSide], m: Machine) -> list[str]:
    """What ``sides`` read: the system, Python, the harness's gates/, each tree's kernels/.
    Library paths that would show a run folder, the home or the harness's root (the ledger,
    runs/, other worktrees under it) are left out."""
    private = [m.home, m.harness] + [s.run_dir for s in sides]
    named = [p for p in (*m.python, *m.libraries)
             if p and p != "/" and not any(_inside(q, p) for q in private)]
    ro = [*SYSTEM, *(f"/etc/{e}" for e in ETC), f"/etc/python{m.python_version}", *named,
          os.path.join(m.harness, "gates"), *(os.path.join(s.tree, "kernels") for s in sides)]
    return list(dict.fromkeys(ro))


def writable(sides: list[ConfinedSide], m: Machine) -> list[str]:
    """What ``sides`` write: each one's run folder (a run side's stage) and its own Triton
    cache; no Triton cache another side reads."""
    return list(dict.fromkeys(p for s in sides for p in (s.writes, s.triton_cache)))


def mounted(sides: list[ConfinedSide], grouped: bool) -> list[str]:
    """What a namespace sandbox of ``sides`` mounts writable: their run folders and their
    Triton caches; a group's, the folders of its members' caches (they start later than its
    sandbox, each with a cache made then; landlock keeps each process to its own,
    :func:`writable`, but for what lies beneath its private /tmp and home: docs/sandbox.md)."""
    return list(dict.fromkeys(p for s in sides for p in (s.writes, s.cache_area if grouped else s.triton_cache)))


def _removed(side: ConfinedSide, alone: bool) -> dict:
    """What is removed when ``side`` ends: its Triton cache (a compile side's is kept for
    the harness to install), and the folder of caches once empty unless its group's close
    does that (a member starting later needs it)."""
    if side.mode == COMPILE_MODE:
        return {"remove": [], "remove_empty": []}
    return {"remove": [side.triton_cache], "remove_empty": [side.cache_area] if alone else []}


def _depth(entry: dict) -> tuple:
    return entry["path"].rstrip("/").count("/"), entry["path"]


def plan(mechanism: str, side: ConfinedSide, m: Machine, group: list[ConfinedSide] | None = None,
         peers: bool = False, landlock_abi: int = 0) -> dict:
    """What ``confine.py`` applies for ``side`` (JSON-able). ``group``: every side of the
    sandbox it shares (its mounts are theirs together); ``peers``: the group's processes are
    one side's ranks, which meet over TCP and shared memory (no landlock between them under
    namespaces: landlock's domains would cut them apart)."""
    members = group or [side]
    env = {"TMPDIR": "/tmp", "TRITON_CACHE_DIR": side.triton_cache}
    if mechanism == "off":
        # no sandbox: only the private Triton cache, removed when it ends (a run side's stage,
        # which holds it, too, unless its group's other ranks still use it: the group's close)
        return {"mechanism": "off", "uid": m.uid, "gid": m.gid, "cwd": m.harness,
                "env": {"TRITON_CACHE_DIR": side.triton_cache}, "stage": [], **_removed(side, not group)}
    stages = [[s.stage, s.run_dir, s.outputs] for s in members if not s.own_folder]
    out = {"mechanism": mechanism, "uid": m.uid, "gid": m.gid, "cwd": m.harness, "env": env,
           "stage": list({st[0]: st for st in stages}.values())}
    devices = [*DEVICES, *m.devices]
    own = writable([side], m)
    if mechanism == "namespaces":
        mounts = [{"kind": "ro", "path": p} for p in readable(members, m)]
        mounts += [{"kind": "rw", "path": p} for p in mounted(members, group is not None)]
        mounts += [{"kind": "ro", "path": p} for s in members for p in s.readonly]
        mounts += [{"kind": "tmpfs", "path": "/tmp", "mode": "1777"},
                   *([{"kind": "tmpfs", "path": m.home, "mode": "0700"}] if m.home != "/" else []),
                   {"kind": "proc", "path": "/proc"},
                   {"kind": "tmpfs", "path": "/dev"}, {"kind": "tmpfs", "path": "/dev/shm", "mode": "1777"}]
        mounts += [{"kind": "dev", "path": d} for d in devices]
        mounts += [{"kind": "symlink", "path": f"/dev/{n}", "target": t} for n, t in
                   (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                    ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"))]
        out["mounts"] = sorted(mounts, key=_depth)
        out.update(_removed(side, not group))  # its Triton cache (home and /tmp: its tmpfs)
        out["landlock"] = None if peers or not landlock_abi else {
            "read": ["/"], "write": own + ["/tmp", "/dev/shm", m.home], "devices": devices,
            "own_proc": True, "tcp": False}
    elif mechanism == "user":
        if not m.user:
            raise SandboxUnavailable(f"sandbox: user: no user {SANDBOX_USER!r} on this machine "
                                     f"(expected one, got none); fix: {fix_text()}")
        name, uid, gid = m.user
        # its own home, /tmp and Triton cache (the launcher's copy of main's compiled kernels,
        # made the user's with its folder), made by the side itself once it is that user and
        # removed when it ends: every side is the same user, so a cache shared by sides would
        # be writable by every other side (a candidate's by main's)
        private = side.private
        env.update(TMPDIR=os.path.join(private, "tmp"), HOME=os.path.join(private, "home"))
        out["user"] = {"name": name, "uid": uid, "gid": gid}
        out["make_as_user"] = [env["TMPDIR"], env["HOME"], env["TRITON_CACHE_DIR"]]
        removed = _removed(side, not group)
        out["remove"] = [private] + removed["remove"]
        out["remove_empty"] = removed["remove_empty"]
        # the folders it writes become the user's when it starts and the launcher's again when
        # it ends (a group's: when the group closes), 0700 then: no later side enters them
        out["own"] = list(dict.fromkeys([side.writes, side.triton_cache]))
        out["owner"] = [m.uid, m.gid]
        out["env_keep"] = list(ENV_KEEP)
        # no network but, for one side's ranks, TCP (they meet on 127.0.0.1)
        out["seccomp"] = {"inet_stream": peers}
        out["landlock"] = None
    else:
        # its own home, /tmp and Triton cache, removed when it ends (sides that share a run
        # folder: one each)
        private = side.private
        removed = _removed(side, not group)
        out["remove"] = [private] + removed["remove"]
        out["remove_empty"] = removed["remove_empty"]
        env.update(TMPDIR=os.path.join(private, "tmp"), HOME=os.path.join(private, "home"))
        # Python finds a package by listing the folders of sys.path: the harness's root may
        # not be listed (runs/ is there), so gates/ is reached through a folder of links
        py = os.path.join(private, "py")
        out["make"] = [env["TMPDIR"], env["HOME"], py]
        out["links"] = [[os.path.join(py, "gates"), os.path.join(m.harness, "gates")]]
        out["path_first"] = py
        # ranks meet over TCP on 127.0.0.1 and NCCL in /dev/shm: with no network namespace
        # they need both (docs/sandbox.md)
        out["landlock"] = {"read": readable([side], m) + list(PROC), "list": [side.tree],
                           "write": own + (["/dev/shm"] if peers or group else []),
                           "devices": devices, "own_proc": True, "tcp": peers}
        # what landlock leaves open: sockets other than TCP (a UDP datagram to a listener)
        out["seccomp"] = {"inet_stream": peers}
    return out


# ------------------------------------------------------------------ the shell
_MODE: contextvars.ContextVar = contextvars.ContextVar("kern_sandbox_mode", default="auto")
_GROUP: contextvars.ContextVar = contextvars.ContextVar("kern_sandbox_group", default=None)
_SEED: contextvars.ContextVar = contextvars.ContextVar("kern_sandbox_seed", default=None)


@contextmanager
def seeded(cache):
    """Within the block, each side this thread starts gets a private Triton cache that is a
    copy of ``cache`` (main's compiled kernels, gates/compiled.py; None: an empty one)."""
    token = _SEED.set(str(cache) if cache else None)
    try:
        yield
    finally:
        _SEED.reset(token)


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
            group = moved_group(Path(path).read_text(errors="replace"), src, known_as or dst) \
                if name.startswith("__grp__") and name.endswith(".json") else None
            if group is None:
                shutil.copyfile(path, to, follow_symlinks=False)
            else:
                Path(to).write_text(group)
            copied += os.path.getsize(path)
    return copied


def moved_group(text: str, src: str, dst: str) -> str | None:
    """Pure: a Triton group file's text with its members' paths moved from ``src`` to
    ``dst`` (members outside ``src`` left out); None where it is not a group file (copied
    as it is: Triton reads what it wrote)."""
    try:
        data = json.loads(text)
        children = data["child_paths"]
        if not isinstance(children, dict):
            return None
    except (ValueError, TypeError, KeyError):
        return None
    roots = {os.path.normpath(src), os.path.realpath(src)}
    moved = {}
    for name, p in children.items():
        p = os.path.normpath(str(p))
        root = next((r for r in roots if _inside(p, r)), None)
        if root is not None:
            moved[name] = os.path.join(os.path.normpath(dst), os.path.relpath(p, root))
    return json.dumps({**data, "child_paths": moved})


def fresh_cache(side: ConfinedSide, seed: str | None) -> None:
    """The side's Triton cache, new before it starts: whatever a process of the same name
    left there (one killed before its sandbox removed it) is removed, then ``seed`` copied
    in (a compile side's starts empty: it compiles main's kernels from main's source alone)."""
    shutil.rmtree(side.triton_cache, ignore_errors=True)
    if seed and side.mode != COMPILE_MODE and os.path.isdir(seed):
        copy_cache(seed, side.triton_cache)
    os.makedirs(side.triton_cache, exist_ok=True)


@contextmanager
def configured(mode: str | None):
    """Within the block, sides started by this thread use kern.yaml's ``sandbox`` ``mode``
    (None: the default, ``auto``)."""
    token = _MODE.set(mode or "auto")
    try:
        yield
    finally:
        _MODE.reset(token)


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
                   tuple(dict.fromkeys(os.path.realpath(p) for p in py if p)),
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


def chosen(mode: str | None = None) -> str:
    """The mechanism sides get now (this thread's kern.yaml ``sandbox``)."""
    mode = mode or _MODE.get()
    return "off" if mode == "off" else choose(mode, facts())


def _spec_of(cmd: list[str]) -> dict | None:
    try:
        path = cmd[cmd.index("--spec") + 1]
        return json.loads(Path(path).read_text()) if path.endswith(".json") else json.loads(path)
    except (ValueError, IndexError, OSError):
        return None


def _confine(verb: str, *args: str) -> list[str]:
    return [sys.executable, "-I", "-S", CONFINE, verb, *args]


def wrap(cmd: list[str], env: dict | None = None) -> list[str]:
    """``cmd`` (a ``gates.side.driver`` command line) as it must start: in this thread's
    sandbox, joining the group's where one is open; with ``sandbox: off`` confined in nothing
    but its Triton cache. Its private Triton cache is made first (:func:`fresh_cache`)."""
    mech = chosen()
    side = side_of(cmd, _spec_of(cmd))
    m = machine(env)
    fresh_cache(side, _SEED.get())
    g = _GROUP.get()
    if mech == "off":
        return _confine("run", json.dumps(plan("off", side, m, g.sides if g is not None else None)),
                        "--", *cmd)
    _prepare(side, m, cmd)
    cmd = staged(cmd, side)
    abi = facts().landlock_abi
    if g is not None and mech == "namespaces":
        g.admits(side)
        p = plan(mech, side, m, g.sides, g.peers, abi)
        return _confine("join", json.dumps(p), json.dumps(g.held(m)), "--", *cmd)
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


def blocked(path: str, mode_of) -> str:
    """The first folder on the way to ``path`` (``path`` excluded) that others may not search
    (no o+x), "" when none (pure: ``mode_of(folder)`` is its st_mode)."""
    parts = Path(path).parts
    for i in range(1, len(parts)):
        folder = str(Path(*parts[:i]))
        if not mode_of(folder) & 0o001:
            return folder
    return ""


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
        if any(_inside(folder, r) for r in runs) and s.st_uid == os.geteuid():
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
    os.makedirs(side.cache_area, exist_ok=True)  # a group's sandbox mounts it when it starts
    if cmd and not side.own_folder and "--spec" in cmd:
        spec = cmd[cmd.index("--spec") + 1]
        if spec.endswith(".json") and os.path.exists(spec):
            shutil.copyfile(spec, os.path.join(side.stage, os.path.basename(spec)))


@dataclass
class Group:
    """One sandbox for several processes (:func:`group`): started by a ``hold`` process the
    first time a side joins it, ended by :meth:`close`."""
    sides: list
    peers: bool
    mechanism: str = ""  # "user" once a side joined under it: its folders are given back at close
    _holder: subprocess.Popen | None = None
    _held: dict | None = None
    _token: object = None

    def admits(self, side: ConfinedSide) -> None:
        if not any(side.tree == s.tree and side.writes == s.writes for s in self.sides):
            raise ValueError(f"sandbox: the side {side.out} (tree {side.tree}) is not one its group "
                             f"was opened for ({[s.out for s in self.sides]}): a bug of the launcher")

    def held(self, m: Machine) -> dict:
        """The ids of the group's sandbox, started now if it is not yet."""
        if self._held is None:
            for s in self.sides:
                _prepare(s, m)
            p = plan("namespaces", self.sides[0], m, self.sides, self.peers, facts().landlock_abi)
            self._holder = subprocess.Popen(_confine("hold", json.dumps(p)), stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            start_new_session=True)
            line = self._holder.stdout.readline()
            if not line:
                err = self._holder.stderr.read().decode(errors="replace").strip()
                self._holder.wait()
                self._holder = None
                raise SandboxUnavailable(f"sandbox: the group's sandbox did not start: {err[-400:]}")
            self._held = json.loads(line)
        return self._held

    def open(self) -> "Group":
        """From now on, sides this thread starts join this group (until :meth:`leave` or
        :meth:`close`); an enclosing group already open wins (its sandbox must show what these
        sides need)."""
        if _GROUP.get() is None:
            self._token = _GROUP.set(self)
        return self

    def leave(self) -> None:
        """Sides this thread starts from now on no longer join (the sandbox stays)."""
        if self._token is not None:
            _GROUP.reset(self._token)
            self._token = None

    def close(self) -> None:
        """End the group's sandbox (its processes must have ended: whatever is left dies) and
        its run sides' stages (each side handed its documents back when it ended)."""
        self.leave()
        if self._holder is not None:
            try:
                self._holder.stdin.close()
                self._holder.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._holder.kill()
                self._holder.wait()
            self._holder = None
            self._held = None
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

    @contextmanager
    def active(self):
        """:meth:`open` for the block, then :meth:`leave`."""
        self.open()
        try:
            yield self
        finally:
            self.leave()


def side_group(mode: str, tree, out, spec: dict | None = None, peers: bool = True,
               more=()) -> Group:
    """A group for the sides started as ``gates.side.driver MODE --tree TREE --out OUT`` with
    ``spec`` (``more``: further (mode, tree, out) triples, e.g. the bench's other tree)."""
    def one(md, t, o, sp=None):
        return side_of(["gates.side.driver", md, "--tree", str(t), "--out", str(o)], sp)

    return Group([one(mode, tree, out, spec)] + [one(*x) for x in more], peers)


@contextmanager
def group(mode: str, tree, out, spec: dict | None = None, peers: bool = True, more=()):
    """Within the block, the sides this thread starts share one sandbox (with
    ``sandbox: off`` or landlock alone, each side is confined by itself)."""
    g = side_group(mode, tree, out, spec, peers, more)
    try:
        with g.active():
            yield g
    finally:
        g.close()
