"""Headless Chromium driven over its DevTools pipe, with the standard library only.

Started with ``--remote-debugging-pipe``, Chromium reads DevTools protocol commands (JSON, each
ended by a NUL byte) from file descriptor 3 and writes its replies and events to descriptor 4.
`Chromium` passes it the two ends of two pipes there, sends commands and waits for replies;
events (network requests, console messages) are kept for the test to read.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    return next((path for name in CANDIDATES if (path := shutil.which(name))), None)


def _high_fd(fd: int) -> int:
    """The same pipe end at descriptor 10 or above, so moving it to 3 or 4 cannot clobber the
    other end."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Chromium:
    """One headless browser; `open` gives a page, `call` sends any DevTools command."""

    def __init__(self, exe: str, width: int = 1280, height: int = 900, timeout: float = 60.0):
        self.timeout, self.size = timeout, (width, height)
        self.events: list[dict[str, Any]] = []
        self._profile = tempfile.mkdtemp(prefix="lenbench-chromium-")
        child_in, self._send_fd = (_high_fd(fd) for fd in os.pipe())
        self._recv_fd, child_out = (_high_fd(fd) for fd in os.pipe())
        args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                f"--user-data-dir={self._profile}", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--hide-scrollbars", "--mute-audio",
                f"--window-size={width},{height}", "about:blank"]
        # bash (dash takes one-digit descriptors only) moves the pipe ends to 3 and 4, then
        # becomes Chromium
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$@" 3<&{child_in} 4>&{child_out}', "bash", *args],
            pass_fds=(child_in, child_out), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(child_in)
        os.close(child_out)
        self._buffer = b""
        self._next_id = 0

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, RuntimeError, TimeoutError):
                self.call("Browser.close", timeout=10)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for fd in (self._send_fd, self._recv_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float | None = None) -> dict[str, Any]:
        """Send one command and return its result; raise on an error reply or a timeout."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._send_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._recv_fd], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._recv_fd, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def open(self, url: str) -> Page:
        """A new tab showing `url`, loaded (network events recorded from the start)."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.resize(*self.size)
        page.call("Network.enable")
        page.call("Page.enable")
        page.call("Page.navigate", {"url": url})
        page.wait_for("document.readyState === 'complete'")
        return page


class Page:
    def __init__(self, browser: Chromium, session: str):
        self.browser, self.session = browser, session

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.call(method, params, self.session)

    def resize(self, width: int, height: int) -> None:
        """Lay the page out at `width` x `height` CSS pixels (a laptop, a phone)."""
        self.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        reply = self.call("Runtime.evaluate", {"expression": expression,
                                               "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression!r} raised: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(f"page never satisfied {expression!r}")
            time.sleep(0.05)

    def screenshot(self) -> bytes:
        """A PNG of the page's viewport."""
        return base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.browser.events
                if e.get("method") == "Network.requestWillBeSent"
                and e.get("sessionId") == self.session]
