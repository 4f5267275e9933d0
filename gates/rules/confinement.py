"""The sandbox's policy (design.md: "Candidate code is untrusted"; docs/sandbox.md says what it
closes and what it does not): which mechanism kern.yaml's ``sandbox`` gets on a machine
(:func:`choose`, over the :class:`Facts` probed there) and what one side process may see,
write and reach under it (:func:`plan`, over the :class:`ConfinedSide` its command line names
and the :class:`Machine` it runs on). Pure: the facts are gathered, the plans applied and the
holders started by gates/launch/sandbox.py; gates/side/confine.py enforces a plan in the side.

A plan's file system is an allow-list: the system's programs and libraries, Python, the
harness's ``gates/``, its tree's ``kernels/``, its own run folder writable, a private ``/tmp``,
home and Triton cache; nothing else of the machine exists there: no home, no ledger, no other
run's or worktree's files, no main's recording, no other side's Triton cache. No network, and
the GPU's device nodes.

Mechanisms, strongest first (:data:`MECHANISMS`): ``namespaces`` (user, mount, network, PID
and IPC namespaces; landlock on top where the kernel has it), ``landlock`` alone (the same
allow-list as path rules, TCP refused; no mount or network namespace) and ``user`` (neither:
the side drops to the unprivileged :data:`SANDBOX_USER` under a seccomp socket filter; what it
reads is then decided by file permissions alone, docs/sandbox.md). kern.yaml's ``sandbox``
(:data:`MODES`) picks one, ``auto`` the strongest this machine allows, ``off`` none.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path


MODES = ("auto", "namespaces", "landlock", "user", "off")


MECHANISMS = ("namespaces", "landlock", "user")


# the unprivileged user of the ``user`` mechanism: fixed, not a kern.yaml key (it exists on
# every Debian and RHEL; a dedicated user would be stronger: docs/sandbox.md)
SANDBOX_USER = "nobody"


# what a side under ``user`` keeps of the environment it was started with (gates/launch/process.py's
# side_env and a rank's variables; a test holds them): nothing else of the launcher's
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "NCCL_NVLS_ENABLE",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "CUDA_HOME", "LD_LIBRARY_PATH",
            "VIRTUAL_ENV", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "OMP_NUM_THREADS",
            "KERN_SIDE_MEMORY_BYTES", "KERN_SIDE_EXPECTS_CUDA", "RANK", "WORLD_SIZE", "LOCAL_RANK",
            "MASTER_ADDR", "MASTER_PORT")


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


# the side that compiles main's kernels (gates/launch/compiled.py): its Triton cache is the one it
# builds, in its run folder (COMPILED_CACHE), kept when it ends for the harness to install
COMPILE_MODE = "compile"


COMPILED_CACHE = "triton"


class SandboxUnavailable(RuntimeError):
    """kern.yaml asks for a sandbox this machine cannot give (the operator or the user acts)."""


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
    harness: str  # the harness's root (its gates/ is shown; its runs/ never)
    libraries: tuple[str, ...] = ()  # CUDA_HOME, LD_LIBRARY_PATH, PYTHONPATH entries
    devices: tuple[str, ...] = ()  # the GPU's device nodes present here
    user: tuple = ()  # (name, uid, gid) of SANDBOX_USER where it exists
    python_version: str = f"{sys.version_info[0]}.{sys.version_info[1]}"


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def readable(sides: list[ConfinedSide], m: Machine) -> list[str]:
    """What ``sides`` read: the system, Python, the harness's gates/, each tree's kernels/.
    Library paths that would show a run folder, the home or the harness's root (the ledger,
    runs/, other worktrees under it) are left out."""
    private = [m.home, m.harness] + [s.run_dir for s in sides]
    named = [p for p in (*m.python, *m.libraries)
             if p and p != "/" and not any(inside(q, p) for q in private)]
    ro = [*SYSTEM, *(f"/etc/{e}" for e in ETC), f"/etc/python{m.python_version}", *named,
          os.path.join(m.harness, "gates"), *(os.path.join(s.tree, "kernels") for s in sides)]
    return list(dict.fromkeys(ro))


def writable(sides: list[ConfinedSide], m: Machine) -> list[str]:
    """What ``sides`` write: each one's run folder (a run side's stage) and its own Triton
    cache; no Triton cache another side reads."""
    return list(dict.fromkeys(p for s in sides for p in (s.writes, s.triton_cache)))


def mounted(side: ConfinedSide) -> list[str]:
    """What a namespace sandbox of ``side`` mounts writable: its run folder (a run side's
    stage) and its own Triton cache. A side joining a group builds its root from its own plan
    too (:func:`plan` with ``shm``): no group mounts another member's folders or caches."""
    return list(dict.fromkeys((side.writes, side.triton_cache)))


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
         peers: bool = False, landlock_abi: int = 0, shm: str | None = None) -> dict:
    """What ``confine.py`` applies for ``side`` (JSON-able). ``group``: the sides of the
    sandbox it shares (their stages are handed back by whichever ends; under namespaces each
    member's root is its own: it mounts only its own tree, run folder and cache); ``peers``:
    the group's processes are one side's ranks, which meet over TCP and shared memory (no
    landlock between them under namespaces: landlock's domains would cut them apart);
    ``shm``: the group's shared-memory folder on the machine, mounted at /dev/shm in every
    member (torch's CUDA IPC counts its consumers in a /dev/shm file, NCCL meets there)."""
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
        mounts = [{"kind": "ro", "path": p} for p in readable([side], m)]
        mounts += [{"kind": "rw", "path": p} for p in mounted(side)]
        mounts += [{"kind": "ro", "path": p} for p in side.readonly]
        mounts += [{"kind": "tmpfs", "path": "/tmp", "mode": "1777"},
                   *([{"kind": "tmpfs", "path": m.home, "mode": "0700"}] if m.home != "/" else []),
                   {"kind": "proc", "path": "/proc"}, {"kind": "tmpfs", "path": "/dev"},
                   {"kind": "bind", "path": "/dev/shm", "source": shm} if shm else
                   {"kind": "tmpfs", "path": "/dev/shm", "mode": "1777"}]
        mounts += [{"kind": "dev", "path": d} for d in devices]
        mounts += [{"kind": "symlink", "path": f"/dev/{n}", "target": t} for n, t in
                   (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                    ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"))]
        out["mounts"] = sorted(mounts, key=_depth)
        # its Triton cache (home and /tmp: its tmpfs) and, once empty, their folder: a group's
        # members mount only their own caches, so none needs the folder after it
        out.update(_removed(side, True))
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


def held_plan(m: Machine) -> dict:
    """What a group's holder (``confine.py hold``) mounts: nothing but a /proc of its PID
    namespace (PID 1 of a group reaps and ends what its members' sides left behind; it runs
    nothing of any tree, and no member enters its mounts: each builds its own root)."""
    return {"mechanism": "namespaces", "uid": m.uid, "gid": m.gid,
            "mounts": [{"kind": "proc", "path": "/proc"}]}


def moved_group(text: str, src: str | tuple[str, ...], dst: str) -> str | None:
    """Pure: a Triton group file's text with its members' paths moved from ``src`` to
    ``dst`` (members outside ``src`` left out); None where it is not a group file (copied
    as it is: Triton reads what it wrote). ``src``: the cache's folder, or every path it is
    known by (as named and its real path: the shell resolves links, this reads no file)."""
    try:
        data = json.loads(text)
        children = data["child_paths"]
        if not isinstance(children, dict):
            return None
    except (ValueError, TypeError, KeyError):
        return None
    roots = {os.path.normpath(s) for s in ((src,) if isinstance(src, str) else src)}
    moved = {}
    for name, p in children.items():
        p = os.path.normpath(str(p))
        root = next((r for r in roots if inside(p, r)), None)
        if root is not None:
            moved[name] = os.path.join(os.path.normpath(dst), os.path.relpath(p, root))
    return json.dumps({**data, "child_paths": moved})


def blocked(path: str, mode_of) -> str:
    """The first folder on the way to ``path`` (``path`` excluded) that others may not search
    (no o+x), "" when none (pure: ``mode_of(folder)`` is its st_mode)."""
    parts = Path(path).parts
    for i in range(1, len(parts)):
        folder = str(Path(*parts[:i]))
        if not mode_of(folder) & 0o001:
            return folder
    return ""
