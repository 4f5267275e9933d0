"""The first code of a side's process: enter the sandbox ``gates/launch/sandbox.py`` decided, then
exec the side's command (``python -m gates.side.driver ...``). Run as a script with the
standard library only (``python -I -S confine.py VERB PLAN [GROUP] -- CMD...``), before the
candidate's tree exists in any process; it decides nothing: the plan names every path, mount
and rule, and this file applies them through the kernel's own calls (ctypes).

Verbs:
  run   create a sandbox and run CMD in it (a side alone);
  hold  create a sandbox's namespaces, print their ids as one JSON line, keep them until
        stdin closes (a group: the ranks of one side, the model store and the sides that
        attach to it); its PID 1 kills whatever a member's side left behind;
  join  run CMD in the namespaces a ``hold`` keeps (GROUP: its JSON line), but for the
        mounts: a root of its own from PLAN, as a side alone; whatever CMD leaves behind is
        killed when it ends.

Namespaces (the plan's ``mechanism`` "namespaces"): this process (P) unshares user, network,
PID and IPC namespaces and forks C, PID 1 there. C unshares a mount namespace, builds a new
root on a tmpfs from the plan's allow-list (everything else of the machine is simply absent),
pivots into it, brings the empty network's loopback up, then unshares a second user and mount
namespace so every mount is locked (the side's code, root in its namespace or not, can neither
unmount nor remount one). P waits and exits as C does (a signal as a signal).

Landlock (both mechanisms where the plan's ``landlock`` rules are set): the side's file
accesses, TCP and signals are restricted by path beneath, after ``no_new_privs``. Seccomp
(the plan's ``seccomp``, with landlock alone and with ``user``): sockets other than Unix ones
(and TCP, for ranks) and io_uring are refused.

User (the plan's ``mechanism`` "user", launched as root): P makes the plan's ``own`` folders
the plan's user's (0700), forks the side, which drops to that user for good (no supplementary
groups), makes its private home, /tmp and Triton cache, takes the seccomp filter and starts
with only the environment the plan keeps; when it ends P gives ``own`` back to the launcher
(``give_back``: a side alone; a group's when the group closes). Ownership changes never follow
a symbolic link: the side's code may still be changing its folder.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import platform
import re
import shutil
import signal
import socket
import stat
import struct
import sys
import time

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MNT_DETACH = 2
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38
SYS_MOUNT_SETATTR, SYS_LANDLOCK_CREATE, SYS_LANDLOCK_ADD, SYS_LANDLOCK_RESTRICT = 442, 444, 445, 446
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())

# landlock (include/uapi/linux/landlock.h)
LL_EXECUTE, LL_WRITE_FILE, LL_READ_FILE, LL_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
LL_REFER, LL_TRUNCATE, LL_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
LL_FILE_RIGHTS = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV
LL_BIND_TCP, LL_CONNECT_TCP = 1, 2
LL_SCOPE_SIGNAL = 2
LL_RULE_PATH_BENEATH = 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


class SandboxError(RuntimeError):
    """The sandbox could not be entered (the environment must allow what the plan needs)."""


def _check(ret: int, what: str) -> int:
    if ret < 0:
        e = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(e)} (errno {errno.errorcode.get(e, e)})")
    return ret


def _b(path: str | None) -> bytes | None:
    return None if path is None else os.fsencode(path)


def mount(src, dst, fstype=None, flags=0, data=None) -> None:
    _check(_libc.mount(_b(src), _b(dst), _b(fstype), flags, _b(data)), f"mount {src} on {dst}")


def set_attr(path: str, attrs: int, recursive: bool) -> None:
    """mount_setattr(2): ``attrs`` on the mount at ``path`` (and every mount below it)."""
    attr = struct.pack("QQQQ", attrs, 0, 0, 0)
    buf = ctypes.create_string_buffer(attr, len(attr))
    flags = AT_RECURSIVE if recursive else 0
    _check(_libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, _b(path), flags, buf, len(attr)),
           f"mount_setattr {path}")


def unshare(flags: int, what: str) -> None:
    _check(_libc.unshare(flags), f"unshare({what})")


def setns(fd: int, what: str) -> None:
    _check(_libc.setns(fd, 0), f"setns({what})")


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl({option})")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def map_ids(inner_uid: int, outer_uid: int, inner_gid: int, outer_gid: int) -> None:
    """This process's user namespace: one user and one group, mapped to the parent's."""
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{inner_uid} {outer_uid} 1")
    _write("/proc/self/gid_map", f"{inner_gid} {outer_gid} 1")


# ------------------------------------------------------------------ the new root
def _mkdirs(path: str) -> None:
    os.makedirs(path, mode=0o755, exist_ok=True)


def _place(src: str, dst: str) -> None:
    """An empty mount point at ``dst`` of the kind of ``src`` (file or directory)."""
    if os.path.isdir(src):
        _mkdirs(dst)
    else:
        _mkdirs(os.path.dirname(dst))
        if not os.path.lexists(dst):
            os.close(os.open(dst, os.O_WRONLY | os.O_CREAT, 0o644))


def build_root(plan: dict, old: str, new: str) -> None:
    """Mount the plan's file system at ``new`` (sources read through ``old``, the machine's
    root): every entry, parents first, as the plan orders them."""
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for entry in plan["mounts"]:
        kind, path = entry["kind"], entry["path"]
        dst = new + path
        if kind == "symlink":
            _mkdirs(os.path.dirname(dst))
            if not os.path.lexists(dst):
                os.symlink(entry["target"], dst)
        elif kind in ("ro", "rw", "dev"):
            src = old + path
            if not os.path.lexists(src):
                continue  # the plan lists what may be there (a library folder, a GPU node)
            if os.path.islink(src):
                _mkdirs(os.path.dirname(dst))
                if not os.path.lexists(dst):
                    os.symlink(os.readlink(src), dst)
                continue
            _place(src, dst)
            mount(src, dst, None, MS_BIND | MS_REC)
            if kind == "ro":
                set_attr(dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, recursive=True)
            elif kind == "rw":
                set_attr(dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, recursive=True)
        elif kind == "bind":  # a folder of the machine at another path (a group's /dev/shm)
            src = old + entry["source"]
            _place(src, dst)
            mount(src, dst, None, MS_BIND | MS_REC)
            set_attr(dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, recursive=True)
        elif kind == "tmpfs":
            _mkdirs(dst)
            mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={entry.get('mode', '0755')}")
        elif kind == "dir":
            _mkdirs(dst)
        elif kind == "proc":
            _mkdirs(dst)
            try:
                mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            except SandboxError as e:
                # a container that masks parts of its /proc refuses a fresh one; the machine's
                # would show every process's environment (the launcher's API keys)
                raise SandboxError(f"a /proc of its own was refused ({e}): a container that "
                                   f"masks /proc") from None
        else:
            raise SandboxError(f"plan: unknown mount kind {kind!r} at {path}")
    set_attr(new, MOUNT_ATTR_RDONLY, recursive=False)  # the root itself: nothing new at /


def loopback_up() -> None:
    """The new network namespace's lo, up: the ranks of one side meet on 127.0.0.1 there."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s.fileno(), 0x8913, req))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH22x", b"lo", flags | 1))  # SIOCSIFFLAGS


def enter_root(plan: dict, group_user: int | None = None) -> None:
    """In C (PID 1 of the new PID namespace, root of user namespace 1): a mount namespace
    holding only the plan's file system, its mounts locked by a second user namespace.
    In K (a side joining a group, ``group_user``: a descriptor of the group's second user
    namespace): the same file system, then into the group's user namespace, which holds no
    capability over K's mount namespace (user namespace 1's): nothing there can be unmounted
    or remounted, and a mount namespace unshared from it has its mounts locked. The group's
    members share that user namespace, as CUDA IPC's and ptrace's checks between the ranks of
    one side expect."""
    if SYS_PIVOT_ROOT is None:
        raise SandboxError(f"no pivot_root syscall number known for {platform.machine()}")
    unshare(CLONE_NEWNS, "mount")
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the machine
    base = "/tmp"
    mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
    os.mkdir(base + "/old")
    os.mkdir(base + "/new")
    _check(_libc.syscall(SYS_PIVOT_ROOT, _b(base), _b(base + "/old")), "pivot_root (staging)")
    os.chdir("/")  # the machine's root is /old now, with its own /tmp as it was
    build_root(plan, "/old", "/new")
    os.chdir("/new")
    _check(_libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount the machine's root")
    os.chdir("/")
    if group_user is not None:
        setns(group_user, "user (the group's)")
        os.close(group_user)
        return
    loopback_up()
    uid, gid = plan["uid"], plan["gid"]
    unshare(CLONE_NEWUSER | CLONE_NEWNS, "user, mount (locking the mounts)")
    map_ids(uid, 0, gid, 0)


# ------------------------------------------------------------------ landlock
def landlock_abi() -> int:
    v = _libc.syscall(SYS_LANDLOCK_CREATE, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    return max(0, int(v))


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= LL_REFER
    if abi >= 3:
        rights |= LL_TRUNCATE
    if abi >= 5:
        rights |= LL_IOCTL_DEV
    return rights


def landlock(rules: dict) -> None:
    """Restrict this process and its children to ``rules``: read (and execute) beneath
    ``read``, everything beneath ``write``, read/write/ioctl of the ``devices``, listing (not
    reading) beneath ``list``, reads and writes beneath its own /proc/<pid> (``own_proc``);
    TCP only when ``tcp``; signals only within the sandbox. Paths that do not exist are
    skipped."""
    abi = landlock_abi()
    if abi < 1:
        raise SandboxError("landlock: not supported by this kernel (or disabled at boot)")
    handled = _fs_rights(abi)
    read = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR
    device = (LL_READ_FILE | LL_WRITE_FILE | LL_TRUNCATE | LL_IOCTL_DEV) & handled
    net = (LL_BIND_TCP | LL_CONNECT_TCP) if abi >= 4 and not rules.get("tcp") else 0
    scoped = LL_SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("QQQ", handled, net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    buf = ctypes.create_string_buffer(attr[:size], size)
    fd = _check(_libc.syscall(SYS_LANDLOCK_CREATE, buf, size, 0), "landlock_create_ruleset")
    try:
        # ``own_proc``: writes beneath its own /proc/<pid>: CUDA names the threads it starts
        # through /proc/self/task/<tid>/comm, and cuInit fails (error 304) when that write is
        # refused (seen on the H200, 2026-12-04). Its children's entries stay read-only.
        own_proc = ["/proc/self"] if rules.get("own_proc") else []
        for paths, access in ((rules.get("read", ()), read), (rules.get("write", ()), handled),
                              (rules.get("devices", ()), device), (rules.get("list", ()), LL_READ_DIR),
                              (own_proc, (read | LL_WRITE_FILE | LL_TRUNCATE) & handled)):
            for p in paths:
                if p == "/proc/self":  # this process's own entries, not its neighbours'
                    p = f"/proc/{os.getpid()}"
                try:
                    pfd = os.open(p, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    allowed = access if os.path.isdir(p) else access & LL_FILE_RIGHTS
                    rule = struct.pack("=Qi", allowed, pfd)
                    rb = ctypes.create_string_buffer(rule, len(rule))
                    _check(_libc.syscall(SYS_LANDLOCK_ADD, fd, LL_RULE_PATH_BENEATH, rb, 0),
                           f"landlock_add_rule {p}")
                finally:
                    os.close(pfd)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        _check(_libc.syscall(SYS_LANDLOCK_RESTRICT, fd, 0), "landlock_restrict_self")
    finally:
        os.close(fd)


# ------------------------------------------------------------------ seccomp
# (arch as seccomp_data names it, socket, io_uring_setup): io_uring can open sockets without
# the socket syscall
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}
AF_UNIX, AF_INET, AF_INET6, SOCK_STREAM = 1, 2, 10, 1
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_sockets(inet_stream: bool) -> None:
    """Refuse every socket but a Unix one (and TCP's, for ranks: ``inet_stream``), and
    io_uring, with EACCES: what landlock (ABI 7) does not cover, UDP and raw sockets among it.
    Syscalls of another architecture are refused too (the i386 socketcall way around)."""
    machine = platform.machine()
    if machine not in _SECCOMP_ARCH:
        raise SandboxError(f"seccomp: no syscall numbers known for {machine}")
    arch, nr_socket, nr_uring = _SECCOMP_ARCH[machine]
    LD, JEQ, AND, RET = 0x20, 0x15, 0x54, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_ALU|AND|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EACCES
    prog = [_bpf(LD, 0, 0, 4), _bpf(JEQ, 1, 0, arch), _bpf(RET, 0, 0, deny),
            _bpf(LD, 0, 0, 0), _bpf(JEQ, 3, 0, nr_socket), _bpf(JEQ, 0, 1, nr_uring),
            _bpf(RET, 0, 0, deny), _bpf(RET, 0, 0, allow),
            # socket(domain = args[0], type = args[1])
            _bpf(LD, 0, 0, 16), _bpf(JEQ, 0, 1, AF_UNIX), _bpf(RET, 0, 0, allow)]
    if inet_stream:
        prog += [_bpf(JEQ, 1, 0, AF_INET), _bpf(JEQ, 0, 3, AF_INET6), _bpf(LD, 0, 0, 24),
                 _bpf(AND, 0, 0, 0xF), _bpf(JEQ, 1, 0, SOCK_STREAM)]
    prog += [_bpf(RET, 0, 0, deny), _bpf(RET, 0, 0, allow)]
    filt = ctypes.create_string_buffer(b"".join(prog), 8 * len(prog))
    fprog = struct.pack("=HxxxxxxQ", len(prog), ctypes.addressof(filt))
    buf = ctypes.create_string_buffer(fprog, len(fprog))
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, buf, 0, 0), "seccomp filter")


# ------------------------------------------------------------------ the user
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NODE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _own_below(dfd: int, uid: int, gid: int) -> None:
    for name in os.listdir(dfd):
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                sub = os.open(name, _DIR, dir_fd=dfd)
                try:
                    os.fchown(sub, uid, gid)
                    _own_below(sub, uid, gid)
                finally:
                    os.close(sub)
            elif stat.S_ISLNK(st.st_mode) or stat.S_ISSOCK(st.st_mode):
                os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
            else:
                fd = os.open(name, _NODE, dir_fd=dfd)
                try:
                    got = os.fstat(fd)
                    # a file with another link may be someone else's (a hard link to it)
                    if got.st_nlink == 1 and (stat.S_ISREG(got.st_mode) or stat.S_ISFIFO(got.st_mode)):
                        os.fchown(fd, uid, gid)
                finally:
                    os.close(fd)
        except OSError:
            continue  # gone meanwhile, or nothing that may change owner


def own_tree(path: str, uid: int, gid: int, mode: int = 0o700) -> None:
    """``path`` (a folder, ``mode``) and everything beneath it made ``uid``:``gid``'s, through
    file descriptors and never through a symbolic link (a process of the side may be swapping
    one in); below a nesting deeper than Python recurses, owners stay as they are (the folder
    itself, 0700, is still the new owner's alone)."""
    try:
        fd = os.open(path, _DIR)
    except OSError:
        return
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
        try:
            _own_below(fd, uid, gid)
        except RecursionError:
            pass
    finally:
        os.close(fd)


def drop_to(user: dict) -> None:
    """Become the plan's user for good: its uid and gid (real, effective, saved), no
    supplementary groups; refused if root could be got back."""
    uid, gid = int(user["uid"]), int(user["gid"])
    if uid == 0 or gid == 0:
        raise SandboxError(f"user: expected an unprivileged user, got uid {uid} gid {gid}")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise SandboxError(f"user: the ids did not change to {uid}:{gid} ({os.getresuid()}, "
                           f"{os.getresgid()}, {os.getgroups()})")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise SandboxError(f"user: uid 0 could be set again after dropping to {uid}")


# ------------------------------------------------------------------ the verbs
def _exec(plan: dict, cmd: list[str]) -> None:
    """The last step in the side's own process: its user, its rules, its environment, then CMD."""
    if plan.get("user"):
        drop_to(plan["user"])
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the change of ids cleared it
        for d in plan.get("make_as_user", ()):
            os.makedirs(d, mode=0o700, exist_ok=True)
    if plan.get("landlock"):
        landlock(plan["landlock"])
    if plan.get("seccomp"):
        seccomp_sockets(plan["seccomp"]["inet_stream"])
    env = os.environ
    if "env_keep" in plan:  # nothing of the launcher's environment beyond what the plan keeps
        env = {k: os.environ[k] for k in plan["env_keep"] if k in os.environ}
    env.update(plan.get("env", {}))
    if plan.get("path_first"):
        env["PYTHONPATH"] = os.pathsep.join(
            [plan["path_first"]] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.chdir(plan["cwd"])
    os.execvpe(cmd[0], cmd, env)


def _exit_as(status: int) -> None:
    """Leave as the child did: its exit code, or its signal (so the caller classifies it)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two take no handler (EINVAL)
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        time.sleep(1)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def _fail(text: str) -> None:
    os.write(2, f"sandbox: {text}\n".encode())
    os._exit(125)


def _start(plan: dict, cmd: list[str], first=None, what: str = "") -> int:
    """Fork the side's process and return its PID. The child dies with this process, runs
    ``first()`` (a step only it takes, e.g. entering a mount namespace), then :func:`_exec`;
    anything that fails before the exec ends it with 125 and ``what`` + the reason on stderr."""
    pid = os.fork()
    if pid == 0:
        try:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if first is not None:
                first()
            _exec(plan, cmd)
        except BaseException as e:  # noqa: BLE001
            _fail(f"{what}{e}")
    return pid


def _init(plan: dict, cmd: list[str]) -> int:
    """C, PID 1 of the sandbox: start the side as D (never PID 1 itself: the kernel drops
    signals to an init that has no handler, a side's own SIGSEGV included), reap whatever is
    left to it, and return D's wait status when D ends (the namespace then ends with C)."""
    d = _start(plan, cmd)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == d:
            return status


def create(plan: dict, cmd: list[str] | None) -> tuple[int, int]:
    """P's half: the namespaces, then C (its PID here is returned) in the new root, running
    ``cmd`` (None: holding the sandbox for a group). Returns (C's PID, the pipe on which C
    sends D's wait status); a failure to build the sandbox raises here."""
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC, "user, network, PID, IPC")
    map_ids(0, uid, 0, gid)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            enter_root(plan)
        except BaseException as e:  # noqa: BLE001 - everything goes back to P as text
            os.write(w, f"{e}".encode() or b"failed")
            os._exit(125)
        os.write(w, b"\0")
        if cmd is None:
            os.close(w)
            _hold_forever()
        status = _init(plan, cmd)
        os.write(w, struct.pack("=i", status))
        os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    if got != b"\0":
        got += os.read(r, 4096)
        os.close(r)
        os.waitpid(pid, 0)
        raise SandboxError(got.decode(errors="replace") or "the sandbox's first process died")
    return pid, r


def _status_of(pid: int, r: int) -> int:
    """D's wait status as C sent it, else C's own (C killed: the side's group was)."""
    got = b""
    while len(got) < 4:
        more = os.read(r, 4 - len(got))
        if not more:
            break
        got += more
    os.close(r)
    own = os.waitpid(pid, 0)[1]
    return struct.unpack("=i", got)[0] if len(got) == 4 else own


def _ns_ids(pid: int) -> dict:
    return {n: os.stat(f"/proc/{pid}/ns/{n}").st_ino for n in ("user", "mnt", "net", "pid", "ipc")}


def hand_back(plan: dict) -> None:
    """Move a run side's documents from its stage to the folder its launcher named: only
    regular files whose names the plan expects (nothing else the side wrote leaves)."""
    for stage, dest, pattern in plan.get("stage", ()):
        try:
            names = os.listdir(stage)
        except OSError:
            continue
        for name in names:
            src = os.path.join(stage, name)
            if re.match(pattern, name) and stat.S_ISREG(os.lstat(src).st_mode):
                os.replace(src, os.path.join(dest, name))
                if plan.get("owner"):  # written by the sandbox's user: the launcher's now
                    os.chown(os.path.join(dest, name), *plan["owner"], follow_symlinks=False)
        if plan.get("remove_stage"):
            shutil.rmtree(stage, ignore_errors=True)


def _leave(status: int, plan: dict) -> None:
    if plan.get("give_back"):  # the launcher's again, 0700: no later side enters it
        for path in plan.get("own", ()):
            own_tree(path, *plan["owner"])
    hand_back(plan)
    for path in plan.get("remove", ()):  # the side's private home, /tmp and Triton cache
        shutil.rmtree(path, ignore_errors=True)
    for path in plan.get("remove_empty", ()):  # the folder of its cache, once no other uses it
        try:
            os.rmdir(path)
        except OSError:
            pass
    _exit_as(status)


def _close_pipes() -> None:
    for fd in (0, 1):
        os.close(fd)  # the side's pipes belong to the side alone


def verb_run(plan: dict, cmd: list[str]) -> None:
    if plan["mechanism"] == "namespaces":
        pid, r = create(plan, cmd)
        _close_pipes()
        _leave(_status_of(pid, r), plan)
    if plan.get("user"):
        if os.geteuid() != 0:
            raise SandboxError(f"user: only root starts a side as {plan['user']['name']!r} "
                               f"(expected uid 0, got {os.geteuid()})")
        for path in plan.get("own", ()):
            own_tree(path, plan["user"]["uid"], plan["user"]["gid"])
    pid = _start(plan, cmd)
    _close_pipes()
    _leave(os.waitpid(pid, 0)[1], plan)


def _children(of: int) -> list[int]:
    """The processes of this PID namespace whose parent is ``of`` (read off /proc)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != of:
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            if ppid == of:
                out.append(int(name))
    return out


def _reap() -> bool:
    """Reap every child that ended; False once this process has no child left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _end_descendants() -> None:
    """K of a joined side, a child subreaper, once its side's process ended: every process
    that side left behind (a double fork, setsid) was reparented to K; kill each until none is
    left (a child's own children come to K as it dies), so nothing of a side outlives it in the
    group's PID namespace, which outlives judgments."""
    me = os.getpid()
    while True:
        for pid in _children(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not _reap():
            return
        time.sleep(0.01)


def _hold_forever() -> None:
    """C of a group: PID 1 of its namespace until P goes. No member is its child (each side's
    K is its launcher's), so any child it has is a process whose side's K is gone (killed with
    its launcher): C kills it and reaps it."""
    while True:
        for pid in _children(1):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap()
        time.sleep(0.2)


def verb_hold(plan: dict) -> None:
    if plan["mechanism"] != "namespaces":
        raise SandboxError("hold: only a namespace sandbox is held for a group")
    pid, r = create(plan, None)
    os.close(r)
    ids = {"holder": os.getpid(), "root": pid, "outer": _ns_ids(os.getpid()), "inner": _ns_ids(pid)}
    os.write(1, (json.dumps(ids) + "\n").encode())
    os.close(1)
    while os.read(0, 4096):  # the group is over when the coordinator closes our stdin
        pass
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _open_ns(pid: int, name: str, ino: int) -> int:
    fd = os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
    if os.fstat(fd).st_ino != ino:
        os.close(fd)
        raise SandboxError(f"join: process {pid} is no longer the group's sandbox (its {name} "
                           f"namespace changed): the group ended")
    return fd


def _joined_side(plan: dict, cmd: list[str], group_user: int) -> None:
    """K: in the group's namespaces, a root of its own from its own plan (its tree, its run
    folder, its Triton cache: what a side alone would see, and the group's /dev/shm), then,
    as a child subreaper, the side's process D; when D ends, whatever it left behind is killed
    (:func:`_end_descendants`) and K leaves as D did."""
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        enter_root(plan, group_user)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # kept across the change of user namespace; said again
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    except BaseException as e:  # noqa: BLE001
        _fail(f"join: {e}")
    d = _start(plan, cmd, what="join: ")
    _close_pipes()
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == d:
            break
    _end_descendants()
    _exit_as(status)


def verb_join(plan: dict, group: dict, cmd: list[str]) -> None:
    """J: into the group's first user namespace and its network, IPC and PID namespaces, not
    its mounts; its child K (in the group's PID namespace) builds a root of its own, enters the
    group's second user namespace and runs CMD (:func:`_joined_side`). J stays in the
    machine's file system to hand back what K staged."""
    outer, inner = group["outer"], group["inner"]
    fds = [(_open_ns(group["holder"], "user", outer["user"]), "user 1")]
    for name in ("net", "ipc", "pid"):
        fds.append((_open_ns(group["root"], name, inner[name]), name))
    group_user = _open_ns(group["root"], "user", inner["user"])
    for fd, what in fds:
        setns(fd, what)
        os.close(fd)
    pid = os.fork()  # the PID namespace holds our children, not us
    if pid == 0:
        _joined_side(plan, cmd, group_user)
    os.close(group_user)
    _close_pipes()
    _leave(os.waitpid(pid, 0)[1], plan)


def main(argv: list[str]) -> None:
    verb, args = argv[0], argv[1:]
    cmd = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    plan: dict = {}
    try:
        plan = json.loads(args[0])
        if verb == "run":
            verb_run(plan, cmd)
        elif verb == "hold":
            verb_hold(plan)
        elif verb == "join":
            verb_join(plan, json.loads(args[1]), cmd)
        else:
            raise SandboxError(f"unknown verb {verb!r} (expected run, hold or join)")
    except (SandboxError, OSError) as e:
        _fail(f"{e} (the environment must allow the {plan.get('mechanism', '?')} sandbox, or "
              f"kern.yaml say sandbox: off)" if isinstance(e, SandboxError) else str(e))


if __name__ == "__main__":
    main(sys.argv[1:])
