"""A headless Chromium for the tests, driven over the DevTools protocol with the standard library only.

Chromium's ``--remote-debugging-pipe`` reads protocol commands from file descriptor 3 and writes replies and events
to descriptor 4, each message JSON ended by a NUL byte. No port, no websocket client, no webdriver: nothing to
download (Playwright fetches its own browser from the internet, Selenium's manager its driver) and nothing the
machine's other processes can connect to. Debian's ``chromium`` package is the browser: :func:`find` returns it, or
``None`` (the browser tests then skip, saying how to install it).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import signal
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

NAMES = ("chromium", "chromium-browser")
"""Debian's package installs ``chromium``; some distributions name it ``chromium-browser``."""


def find() -> str | None:
    """The Chromium executable: ``$BAKEOFF_CHROMIUM`` when set, else the first of :data:`NAMES` on the PATH."""
    given = os.environ.get("BAKEOFF_CHROMIUM")
    return given if given else next((path for name in NAMES if (path := shutil.which(name))), None)


class BrowserError(RuntimeError):
    """The browser answered a command with an error, or did not answer in time."""


class Chromium:
    """One headless Chromium with one page, as a context manager.

    ``console`` collects what a reader's console would show as errors: ``console.error`` calls, uncaught exceptions
    and the browser's own error entries (an image that failed to load or decode, a blocked request).
    """

    def __init__(self, executable: str, width: int = 1400, height: int = 900, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self.console: list[str] = []
        self._profile = tempfile.TemporaryDirectory(prefix="bakeoff-chromium-")
        # The browser's ends of the two pipes, first moved above 9 so that placing them on 3 and 4 cannot
        # overwrite one with the other; our ends stay close-on-exec.
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        theirs = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_browser_r, from_browser_w)]
        os.close(to_browser_r)
        os.close(from_browser_w)
        flags = ["--headless", "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}",
                 f"--window-size={width},{height}", "--no-first-run", "--no-default-browser-check",
                 "--disable-gpu", "--disable-extensions", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--mute-audio", "--hide-scrollbars"]
        if os.geteuid() == 0:  # Chromium refuses to run as root with its sandbox (CI runs the tests as root)
            flags.append("--no-sandbox")
        # Its log goes to a file, not a pipe: a pipe nobody reads would fill and stop the browser.
        self._log = Path(self._profile.name) / "stderr.log"
        log = os.open(self._log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:  # its own process group, so that its zygote and renderers can be ended with it
            self.pid = os.posix_spawn(executable, [executable, *flags, "about:blank"], dict(os.environ),
                                      file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                                                    (os.POSIX_SPAWN_DUP2, log, 2),
                                                    (os.POSIX_SPAWN_DUP2, theirs[0], 3),
                                                    (os.POSIX_SPAWN_DUP2, theirs[1], 4)], setpgroup=0)
        finally:
            for fd in (log, *theirs):
                os.close(fd)
        self.returncode: int | None = None
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self.session = ""
        self.width, self.height = width, height

    def __enter__(self) -> Chromium:
        target = self.send("Target.createTarget", url="about:blank", session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True, session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.resize(self.width, self.height)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.send("Browser.close", session=False)
        except (BrowserError, OSError):
            pass
        deadline = time.monotonic() + 10
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        try:  # whatever of its group is left (nothing, once it closed)
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.returncode is None:
            os.waitpid(self.pid, 0)
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)
        self._profile.cleanup()

    def poll(self) -> int | None:
        """The browser's exit status once it has exited (reaped), else ``None``."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    # --- the protocol --------------------------------------------------------------------------------------------
    def send(self, method: str, session: bool = True, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its reply; the events that arrive meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._event(reply)

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_browser], [], [], max(left, 0))
            chunk = os.read(self._from_browser, 1 << 20) if ready else None
            if not chunk:
                ended = self.poll()
                why = (f"Chromium exited ({ended})" if ended is not None else "Chromium closed its pipe" if ready
                       else f"no answer from Chromium within {self.timeout_s:g} s")
                log = self._log.read_text(errors="replace")[-2000:] if self._log.exists() else ""
                raise BrowserError(f"{why}; its log ends: {log}" if log else why)
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method", ""), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.console.append("console." + params["type"] + ": " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            thrown = details.get("exception", {}).get("description", details.get("text", ""))
            self.console.append(f"exception: {thrown}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.console.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())
        self._events.append(message)

    def wait_for(self, method: str) -> dict[str, Any]:
        """The first event ``method`` not yet taken, waiting for it."""
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method:
                    return self._events.pop(i).get("params", {})
            self._event(self._read())

    # --- what the tests use --------------------------------------------------------------------------------------
    def resize(self, width: int, height: int, mobile: bool = False) -> None:
        """The page's viewport in CSS pixels (a phone: ``mobile=True``, which honours the page's viewport tag)."""
        self.width, self.height = width, height
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=mobile)

    def media(self, kind: str) -> None:
        """Emulate a CSS media type: ``"print"``, or ``""`` for the screen."""
        self.send("Emulation.setEmulatedMedia", media=kind)

    def open(self, path: Path) -> None:
        """Load a local file and wait for its load event."""
        self._events = [e for e in self._events if e.get("method") != "Page.loadEventFired"]
        self.send("Page.navigate", url=path.resolve().as_uri())
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited); a thrown error raises."""
        reply = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression[:80]}: {reply['exceptionDetails']}")
        return reply["result"].get("value")
