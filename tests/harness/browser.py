"""A headless Chromium driven over the DevTools protocol on a pipe, for the journey's browser test.

Chromium's ``--remote-debugging-pipe`` reads protocol messages on its fd 3 and writes them on its
fd 4, each one JSON object ended by a NUL byte: no port, no websocket library, no driver binary,
nothing beyond the standard library and Debian's ``chromium`` package (``.ci/run`` installs it).

:func:`render` opens one page, waits for its load event, evaluates an expression in it and
returns that value with every console message, uncaught exception and log entry the page
produced; :func:`screenshot` writes a PNG of a page. Both end the browser they started.
"""
from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"


def find() -> str | None:
    """The Chromium binary: Debian's path, else ``chromium`` on PATH; None when absent."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    return shutil.which("chromium")


class BrowserError(RuntimeError):
    """The browser did not do what the test asked; the message says what it got."""


@dataclass
class Page:
    value: object  # the evaluated expression's JSON value
    console: list = field(default_factory=list)  # (type, text) of console.* calls
    exceptions: list = field(default_factory=list)  # uncaught exceptions' texts
    log: list = field(default_factory=list)  # (level, source, text) of the browser's log entries

    def errors(self) -> list[str]:
        """Everything the page reported as an error (console.error, exceptions, error logs)."""
        return ([f"console.{t}: {x}" for t, x in self.console if t in ("error", "assert")]
                + [f"exception: {x}" for x in self.exceptions]
                + [f"log {src}: {x}" for lvl, src, x in self.log if lvl == "error"])


class _Chromium:
    def __init__(self, binary: str, width: int, height: int):
        self.profile = tempfile.mkdtemp(prefix="kern-chromium-")
        to_chrome_r, self._w = os.pipe()  # chromium reads its fd 3
        self._r, from_chrome_w = os.pipe()  # chromium writes its fd 4
        args = [binary, "--headless", "--remote-debugging-pipe", "--no-sandbox",
                "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--mute-audio",
                f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
                "about:blank"]
        # bash (dash takes single-digit fds only) puts the two pipe ends at fds 3 and 4 exactly, then becomes chromium
        # its stderr to a file: a pipe nobody reads would block a chatty browser
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}', "bash", *args],
            pass_fds=(to_chrome_r, from_chrome_w), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self._err)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.events: list = []

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline, f"the reply to {method}")
            if m.get("id") == self._id:
                if "error" in m:
                    raise BrowserError(f"chromium refused {method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, timeout: float) -> dict:
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline, f"the event {method}")
            if m.get("method") == method:
                return m
            self.events.append(m)

    def _read(self, deadline: float, what: str) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                err = self._stderr_tail()
                state = "exited" if self.proc.poll() is not None else "still running"
                raise BrowserError(f"chromium ({state}) sent no {what} in time; expected a "
                                   f"DevTools message on its pipe. Its stderr:\n{err}")
            ready, _, _ = select.select([self._r], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    self.proc.wait(timeout=5)
                    continue
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def _stderr_tail(self) -> str:
        self._err.seek(0)
        return self._err.read().decode(errors="replace")[-2000:]

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", timeout=5)
                except (BrowserError, OSError):
                    pass
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
        finally:
            for fd in (self._w, self._r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._err.close()
            shutil.rmtree(self.profile, ignore_errors=True)


def _open(c: _Chromium, url: str, timeout: float) -> str:
    target = c.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = c.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log"):
        c.send(f"{domain}.enable", session=session)
    c.send("Page.navigate", {"url": url}, session=session)
    c.wait_event("Page.loadEventFired", timeout)
    return session


def _collect(events: list, page: Page) -> None:
    for m in events:
        p = m.get("params") or {}
        if m.get("method") == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            page.console.append((p.get("type"), text))
        elif m.get("method") == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails") or {}
            page.exceptions.append((d.get("exception") or {}).get("description") or d.get("text"))
        elif m.get("method") == "Log.entryAdded":
            e = p.get("entry") or {}
            page.log.append((e.get("level"), e.get("source"), e.get("text")))


def render(path: Path, expression: str, *, binary: str | None = None, timeout: float = 60.0,
           settle_s: float = 0.5) -> Page:
    """Load ``path`` (a file) in a fresh headless Chromium, evaluate ``expression`` once the
    load event fired (images included) and ``settle_s`` later, and return its value with what
    the page reported."""
    binary = binary or find()
    if not binary:
        raise BrowserError("no chromium: expected /usr/bin/chromium (Debian's `chromium` "
                           "package; .ci/run installs it)")
    c = _Chromium(binary, 1280, 900)
    try:
        session = _open(c, Path(path).resolve().as_uri(), timeout)
        time.sleep(settle_s)  # late console messages and log entries arrive as events
        r = c.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                        "awaitPromise": True}, session=session)
        if "exceptionDetails" in r:
            raise BrowserError(f"the test's expression threw in the page: {r['exceptionDetails']}")
        page = Page(r.get("result", {}).get("value"))
        _collect(c.events, page)
        return page
    finally:
        c.close()


def screenshot(path: Path, out: Path, *, width: int = 1100, binary: str | None = None,
               timeout: float = 60.0, before: str | None = None) -> Path:
    """A PNG of the whole page at ``path``, ``width`` CSS pixels wide; ``before``: a script
    run in the page first (to open a row's detail, say)."""
    binary = binary or find()
    if not binary:
        raise BrowserError("no chromium: expected /usr/bin/chromium")
    c = _Chromium(binary, width, 900)
    try:
        session = _open(c, Path(path).resolve().as_uri(), timeout)
        if before:
            r = c.send("Runtime.evaluate", {"expression": before, "returnByValue": True,
                                            "awaitPromise": True}, session=session)
            if "exceptionDetails" in r:
                raise BrowserError(f"the script before the screenshot threw: {r['exceptionDetails']}")
        size = c.send("Runtime.evaluate", {"expression": "[document.documentElement.scrollWidth,"
                                                         "document.documentElement.scrollHeight]",
                                           "returnByValue": True}, session=session)
        w, h = size["result"]["value"]
        c.send("Emulation.setDeviceMetricsOverride", {"width": max(width, w), "height": h,
                                                      "deviceScaleFactor": 1, "mobile": False},
               session=session)
        shot = c.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                      session=session, timeout=timeout)
        out.write_bytes(base64.b64decode(shot["data"]))
        return out
    finally:
        c.close()


if __name__ == "__main__":  # python -m tests.harness.browser PAGE.html OUT.png [WIDTH [SCRIPT]]
    import sys

    if len(sys.argv) not in (3, 4, 5):
        sys.exit("usage: python -m tests.harness.browser PAGE.html OUT.png [WIDTH [SCRIPT]]\n"
                 "  SCRIPT runs in the page before the shot, e.g. "
                 "\"document.querySelector('#a-1 button.open').click()\"")
    shot = screenshot(Path(sys.argv[1]), Path(sys.argv[2]),
                      width=int(sys.argv[3]) if len(sys.argv) >= 4 else 1100,
                      before=sys.argv[4] if len(sys.argv) == 5 else None)
    print(f"wrote      {shot}")
