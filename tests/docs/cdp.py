"""A small Chrome DevTools Protocol client over `--remote-debugging-pipe` (no websocket).

Chromium reads NUL-terminated JSON commands on its fd 3 and writes replies and events on
its fd 4. One page target is attached in flat mode; its console errors, uncaught
exceptions and log errors are collected as they arrive.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import time
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
    "--no-first-run",
    "--window-size=1280,900",
]


class Browser:
    """A headless Chromium with one page; `errors` holds what the page reported as errors."""

    def __init__(self, binary: str):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Chromium expects the command pipe on fd 3 and the reply pipe on fd 4.
        self.proc = subprocess.Popen(
            [binary, *FLAGS, "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=lambda: (os.dup2(to_chrome_r, 3), os.dup2(from_chrome_w, 4)),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next_id = 0
        self.errors: list[str] = []
        self.loaded = False
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)

    def call(self, method: str, *, session: bool = False, **params: Any) -> dict:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read(self) -> dict:
        while b"\0" not in self._buf:
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg = json.loads(raw)
        self._note(msg)
        return msg

    def _note(self, msg: dict) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.errors.append(
                params["exceptionDetails"].get("text", "exception")
                + " "
                + json.dumps(params["exceptionDetails"])[:500]
            )
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append("console.error: " + json.dumps(params.get("args"))[:500])
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url')}")
        elif method == "Page.loadEventFired":
            self.loaded = True

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self.loaded = False
        self.call("Page.navigate", session=True, url=url)
        while not self.loaded:
            self._read()

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate",
            session=True,
            expression=expression,
            returnByValue=True,
            awaitPromise=True,
        )
        return result["result"].get("value")

    def wait_for(self, expression: str, polls: int = 300) -> Any:
        """Poll `expression` until it is truthy (every 0.1 s; the count only stops a hang)."""
        for _ in range(polls):
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        return self.evaluate(expression)

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", session=True)["data"])

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.call("Browser.close")
        self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
