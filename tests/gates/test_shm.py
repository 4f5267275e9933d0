"""The sweep of a sandbox group's /dev/shm after a lease of the model store: the keep rule
(gates/rules/shm.py, pure: the store's /proc/self/maps read into (name, inode) pairs, and what
of a listing goes), and its shell on this machine's file system (gates/launch/sandbox.py's
``erase`` and ``Group.sweep_shm``, here on a plain folder: the group's own /dev/shm, joined by
sandboxed processes, is tests/gates/test_sandbox.py's; a real store's, test_store.py's)."""
from __future__ import annotations

import os
import stat
import sys

import pytest
from hypothesis import given, strategies as st

from gates.launch import sandbox as S
from gates.rules import shm as H

# names a member may give its files: anything but "/" and NUL; a backslash is left out of the
# generated ones (the kernel writes a newline as "\012", so "\\012" in a name reads back as one)
names = st.text(st.characters(blacklist_characters="/\x00\\", blacklist_categories=("Cs",)),
                min_size=1, max_size=12).filter(lambda n: n not in (".", ".."))
inodes = st.integers(1, 2**40)


def maps_line(path: str, inode: int, start: int = 0x7f0000000000) -> str:
    """One /proc/<pid>/maps line as the kernel writes it: fixed fields, padded to column 73,
    the path with its newlines as \\012."""
    head = f"{start:012x}-{start + 0x1000:012x} rw-s 00000000 00:1a {inode} "
    return head + " " * max(0, 73 - len(head)) + path.replace("\n", "\\012")


MAPS = "\n".join([
    "5574b2202000-5574b2204000 r--p 00000000 fe:00 260131                     /usr/bin/python3",
    "5574b3a5f000-5574b3a80000 rw-p 00000000 00:00 0                          [heap]",
    "7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0 ",
    maps_line("/dev/shm/torch_2_1804289383_0", 41),
    maps_line("/dev/shm/torch_2_1804289383_0", 41, 0x7f0000100000),  # mapped twice: one pair
    maps_line("/dev/shm/with space and (parens)", 42),
    maps_line("/dev/shm/torch_2_846930886_1 (deleted)", 43),  # unlinked: nothing of the folder
    maps_line("/dev/shm/sub/torch_2_x", 44),  # deeper than /dev/shm: no entry of it
    maps_line("/dev/shm/new\nline", 45),
    maps_line("/tmp/dev/shm/x", 46),
    maps_line("/dev/shmx", 47),
    "7ffd5a1e0000-7ffd5a201000 rw-p 00000000 00:00 0                          [stack]",
])


def test_the_maps_text_gives_the_files_directly_in_dev_shm_that_are_mapped():
    assert H.mapped(MAPS) == {("torch_2_1804289383_0", 41), ("with space and (parens)", 42),
                              ("new\nline", 45)}


def test_the_maps_of_this_process_name_a_file_it_maps_in_dev_shm():
    """The real /proc/self/maps: a file this process maps (in /dev/shm where there is one)."""
    import mmap
    import tempfile

    folder = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    if folder is None:
        pytest.skip("no writable /dev/shm")
    with tempfile.NamedTemporaryFile(dir=folder, prefix="kern test ") as f:
        f.write(b"\0" * 4096)
        f.flush()
        with mmap.mmap(f.fileno(), 4096):
            text = os.fsdecode(open("/proc/self/maps", "rb").read())
            assert (os.path.basename(f.name), os.fstat(f.fileno()).st_ino) in H.mapped(text)


@given(st.lists(st.tuples(names, inodes, st.sampled_from(["shm", "deleted", "deep", "elsewhere"])),
                max_size=8), st.randoms(use_true_random=False))
def test_only_mapped_live_files_directly_in_dev_shm_are_read_back(entries, rng):
    lines = []
    for name, inode, kind in entries:
        path = {"shm": f"/dev/shm/{name}", "deleted": f"/dev/shm/{name} (deleted)",
                "deep": f"/dev/shm/d/{name}", "elsewhere": f"/var/{name}"}[kind]
        lines.append(maps_line(path, inode))
    lines += ["00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon",
              "7ffd5a1e0000-7ffd5a201000 rw-p 00000000 00:00 0                  [vvar]", ""]
    rng.shuffle(lines)
    want = {(n, i) for n, i, kind in entries if kind == "shm" and not n.endswith(H.DELETED)}
    assert H.mapped("\n".join(lines)) == want


@given(st.dictionaries(names, st.tuples(inodes, st.booleans()), max_size=10),
       st.sets(st.tuples(names, inodes), max_size=6), st.data())
def test_an_entry_stays_only_as_a_file_whose_name_and_inode_the_store_maps(listed, extra, data):
    listing = [H.ShmEntry(n, i, d) for n, (i, d) in listed.items()]
    # the store's files: some listed pairs as they are, and pairs of no entry
    keep = frozenset(data.draw(st.sets(st.sampled_from([(e.name, e.inode) for e in listing]))
                               if listing else st.just(set()))) | extra
    gone = H.swept(listing, keep)
    assert [e.name for e in gone] == sorted(e.name for e in gone)
    stays = [e for e in listing if e not in gone]
    assert all(not e.is_dir and (e.name, e.inode) in keep for e in stays)
    assert all(e.is_dir or (e.name, e.inode) not in keep for e in gone)
    assert len(stays) + len(gone) == len(listing)


def test_a_file_named_like_the_stores_is_swept_unless_it_is_the_stores_inode():
    """The store maps torch_2_7 (inode 41). A side that unlinked it and made one of that name
    has another inode; a hard link to it has another name; a folder never stays."""
    keep = frozenset({("torch_2_7", 41)})
    listing = [H.ShmEntry("torch_2_7", 99, False), H.ShmEntry("torch_2_7-link", 41, False),
               H.ShmEntry("torch_2_8", 41, True), H.ShmEntry("planted", 5, False)]
    assert [e.name for e in H.swept(listing, keep)] == ["planted", "torch_2_7", "torch_2_7-link", "torch_2_8"]
    assert H.swept([H.ShmEntry("torch_2_7", 41, False)], keep) == ()


LINE = "7f00-7f01 rw-s 00000000 00:1a {inode} /dev/shm/{name}"


@pytest.mark.parametrize("value,want", [
    ([LINE.format(inode=41, name="torch_2_7"), LINE.format(inode=3, name="a b")],
     frozenset({("torch_2_7", 41), ("a b", 3)})),
    ([], frozenset()),
    ([LINE.format(inode=41, name="torch_2_7") + " (deleted)"], frozenset()),
    (None, None),  # the store could not read its maps
    ({"torch_2_7": 41}, None),
    ([["torch_2_7", 41]], None),
    ([LINE.format(inode=41, name="torch_2_7"), 7], None),
])
def test_the_stores_report_is_read_or_refused_whole(value, want):
    assert H.reported(value) == want


def test_a_sweeps_record_counts_every_name_and_shows_a_few_printable():
    names = [f"planted-{i}" for i in range(7)] + ["odd\udcff\n", "x" * 300]
    done = H.ShmSweep(tuple(sorted(names)), ("stuck",))
    r = done.record()
    assert r["removed"] == 9 and len(r["names"]) == H.NAMES_RECORDED and r["left"] == ["stuck"]
    assert not done.clean and H.ShmSweep(("a",)).clean and not H.ShmSweep((), (), False).clean
    assert H.printable("odd\udcff\n") == "odd\\udcff\\n"
    assert len(H.printable("x" * 300)) == 100
    line = done.line(3)
    assert line.startswith("harness: lease 3: swept 9 entries") and "(+4 more)" in line
    assert "1 could not be removed" in line and "\n" not in line
    assert "not swept" in H.ShmSweep((), (), False).line(1)


# --------------------------------------------------------------------------- on the file system
def _deep(top: str, depth: int) -> None:
    """``depth`` nested folders under ``top``, made relative to each other (no path this long
    could be named)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    os.close(fd)


def test_erase_removes_unreadable_and_deep_folders_and_never_follows_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    outside.chmod(0o750)
    top = tmp_path / "planted"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f").write_text("x")
    (top / "a" / "1.kern-erase").mkdir()  # a name erase itself would pick
    (top / "link").symlink_to(outside)
    (top / "a" / "link").symlink_to(outside / "keep")
    _deep(str(top / "a"), sys.getrecursionlimit() + 200)  # deeper than shutil.rmtree recurses
    (top / "a" / "b").chmod(0)
    (top / "a").chmod(0)
    top.chmod(0)
    assert S.erase(str(top)) and not os.path.lexists(top)
    assert (outside / "keep").read_text() == "mine" and stat.S_IMODE(outside.stat().st_mode) == 0o750
    (tmp_path / "file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert S.erase(str(tmp_path / "file")) and S.erase(str(tmp_path / "dangling"))
    assert S.erase(str(tmp_path / "never-was"))
    assert sorted(os.listdir(tmp_path)) == ["outside"]


def test_a_groups_sweep_keeps_the_named_files_and_removes_everything_else(tmp_path):
    """Group.sweep_shm on a folder standing for a group's /dev/shm (whose mode a member may
    have changed): a file of the keep set stays; the same name on another inode, a hard link
    to a kept file, a folder, a link and a FIFO go."""
    shm = tmp_path / "kern-group-x"
    shm.mkdir()
    (shm / "torch_2_1").write_text("counts")
    (shm / "torch_2_2").write_text("old")
    keep = frozenset({(n, (shm / n).stat().st_ino) for n in ("torch_2_1", "torch_2_2")})
    held = os.open(shm / "torch_2_2", os.O_RDONLY)  # as the store's mapping keeps its inode alive
    (shm / "torch_2_2").unlink()
    (shm / "torch_2_2").write_text("planted")  # the name again, on another inode
    os.link(shm / "torch_2_1", shm / "torch_2_1.copy")
    (shm / "dir" / "sub").mkdir(parents=True)
    (shm / "dir" / "sub").chmod(0)
    (shm / "link").symlink_to(tmp_path)
    os.mkfifo(shm / "fifo")
    shm.chmod(0)
    box = S.Group([], False, shm=str(shm))
    done = box.sweep_shm(keep)
    os.close(held)
    assert done == H.ShmSweep(("dir", "fifo", "link", "torch_2_1.copy", "torch_2_2"))
    assert sorted(os.listdir(shm)) == ["torch_2_1"] and (shm / "torch_2_1").read_text() == "counts"
    assert box.sweep_shm(keep) == H.ShmSweep(())  # nothing more
    assert S.Group([], False).sweep_shm(keep) is None  # no /dev/shm of its own: nothing to sweep
    box.close()
    assert not shm.exists() and box.shm is None
