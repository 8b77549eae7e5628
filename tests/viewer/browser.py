"""Headless Chromium driven over the DevTools protocol through a pipe (`--remote-debugging-pipe`).

Why this driver: it needs nothing but Chromium and the standard library (no chromedriver, whose version must
match the browser's, no websocket package, no npm), it opens no debugging port, and its input events
(`Input.dispatchMouseEvent`, `Input.dispatchKeyEvent`) are the browser's own trusted events, the ones a
person's mouse and keyboard make. Chromium reads commands on fd 3 and writes replies on fd 4, each a JSON
message ended by a NUL byte.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe"]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(RuntimeError):
    pass


class Browser:
    """One Chromium process with a fresh profile under `workdir`; `open(url)` gives a page."""

    def __init__(self, workdir: Path, width: int = 1280, height: int = 900, timeout: float = 60.0) -> None:
        exe = chromium_path()
        if exe is None:
            raise BrowserError("no chromium on PATH (scripts/setup.sh installs it)")
        self.timeout = timeout
        self.width, self.height = width, height
        profile = workdir / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=True)
        cmd_r, self._cmd_w = os.pipe()  # we write commands; Chromium reads them on fd 3
        self._out_r, out_w = os.pipe()  # Chromium writes replies on fd 4

        def to_fds_3_and_4() -> None:  # runs in the child before exec (dup first: an end may already be 3 or 4)
            a, b = os.dup(cmd_r), os.dup(out_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.log_path = workdir / "chromium.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                                          "about:blank"], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         pass_fds=(3, 4), preexec_fn=to_fds_3_and_4)
        os.close(cmd_r)
        os.close(out_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.send("Browser.getVersion")

    # -- protocol -------------------------------------------------------------------------------------------

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send one command and wait for its reply; events that arrive meanwhile go to `self.events`."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._take(self._next_id)
            if reply is not None:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._read(deadline, method)

    def _take(self, wanted: int) -> dict[str, Any] | None:
        while b"\0" in self._buf:
            raw, self._buf = self._buf.split(b"\0", 1)
            obj = json.loads(raw)
            if obj.get("id") == wanted:
                return obj
            if "method" in obj:
                self.events.append(obj)
        return None

    def _read(self, deadline: float, what: str) -> None:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([self._out_r], [], [], max(0.0, left))
        if not ready:
            raise BrowserError(f"{what}: no reply from Chromium in {self.timeout:.0f} s (log: {self.log_path})")
        data = os.read(self._out_r, 1 << 20)
        if not data:
            raise BrowserError(f"{what}: Chromium closed the pipe (log: {self.log_path})")
        self._buf += data

    def open(self, url: str) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                          "deviceScaleFactor": 1, "mobile": False}, session)
        page.navigate(url)
        return page

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._cmd_w, self._out_r):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Page:
    """One tab. Events of its session are read from the browser's event list."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.b = browser
        self.session = session

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.b.send(method, params, self.session)

    def events(self, method: str) -> list[dict[str, Any]]:
        return [e["params"] for e in self.b.events if e.get("sessionId") == self.session and e["method"] == method]

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete'")

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited when it is a promise)."""
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            raise BrowserError(f"{expression!r} threw: {res['exceptionDetails'].get('exception', {}).get('description')}")
        return res["result"].get("value")

    def wait_for(self, expression: str, what: str = "") -> Any:
        """Poll until the expression is truthy (the browser's timeout bounds it; a failure says what it waited for)."""
        deadline = time.monotonic() + self.b.timeout
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"waited {self.b.timeout:.0f} s for {what or expression}")
            time.sleep(0.05)

    def center(self, selector: str) -> tuple[float, float]:
        box = self.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
                        " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
                        " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        if box is None:
            raise BrowserError(f"no element matches {selector}")
        return box[0], box[1]

    def click(self, selector: str) -> None:
        """A mouse click at the middle of the element, as a person's would arrive."""
        x, y = self.center(selector)
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})

    def type(self, selector: str, text: str) -> None:
        """Click into a field and type `text` key by key."""
        self.click(selector)
        for ch in text:
            self.send("Input.dispatchKeyEvent", {"type": "keyDown", "key": ch, "text": ch, "unmodifiedText": ch})
            self.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": ch})

    def press(self, selector: str, key: str, code: int) -> None:
        """Focus the element and press a key that types nothing (e.g. "ArrowDown", 40)."""
        self.eval(f"document.querySelector({json.dumps(selector)}).focus()")
        for kind in ("rawKeyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key,
                                                 "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code})

    def paste(self, selector: str, text: str) -> None:
        """Click into a field and put `text` in at once, as a paste does (one input event)."""
        self.click(selector)
        self.send("Input.insertText", {"text": text})

    def screenshot(self, path: Path, height: int | None = None) -> Path:
        """A PNG of the page from the top, `height` CSS pixels tall (default: the whole page)."""
        full = self.eval("Math.ceil(document.documentElement.scrollHeight)")
        h = min(full, height) if height else full
        self.eval("window.scrollTo(0, 0)")
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": {"x": 0, "y": 0, "width": self.b.width, "height": h,
                                                             "scale": 1}})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def requests(self) -> list[str]:
        """Every URL the page asked for, in order."""
        return [e["request"]["url"] for e in self.events("Network.requestWillBeSent")]

    def console(self) -> list[str]:
        """Console messages and browser log entries (a blocked resource or a CSP refusal shows here)."""
        out = [" ".join(str(a.get("value", a.get("description", ""))) for a in e.get("args", []))
               for e in self.events("Runtime.consoleAPICalled")]
        out += [e["entry"].get("text", "") for e in self.events("Log.entryAdded")]
        return out

    def exceptions(self) -> list[str]:
        return [json.dumps(e["exceptionDetails"])[:500] for e in self.events("Runtime.exceptionThrown")]
