"""Headless Chromium driven over its DevTools protocol on a pipe, with no package to install.

``Browser(chromium, width, height)`` opens a page, evaluates JavaScript, presses keys as trusted input
(``Input.dispatchKeyEvent``: Tab moves the focus, arrows move a slider or a select), switches
print media on, and lists the page's requests and console errors. Used by
tests/test_interactive_figures.py and tests/test_book.py.
"""
import json
import os
import select
import shutil
import subprocess
import tempfile
import time


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``).

    Chromium reads commands from its file descriptor 3 and answers on 4, each message JSON
    ended by a NUL. Events that arrive while waiting for an answer are kept in ``events``.
    """

    KEYS = {"Tab": ("Tab", 9, None), "ArrowLeft": ("ArrowLeft", 37, None), "ArrowUp": ("ArrowUp", 38, None),
            "ArrowRight": ("ArrowRight", 39, None), "ArrowDown": ("ArrowDown", 40, None),
            " ": ("Space", 32, " "), "Enter": ("Enter", 13, "\r")}

    def __init__(self, chromium: str, width: int, height: int = 1000):
        commands_read, self._commands = os.pipe()
        self._answers, answers_write = os.pipe()

        def wire():  # in the child: its fds 3 and 4 (via fds out of their way)
            os.dup2(commands_read, 100)
            os.dup2(answers_write, 101)
            os.dup2(100, 3)
            os.dup2(101, 4)

        self.profile = tempfile.mkdtemp()
        self.process = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "about:blank"],
            preexec_fn=wire, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(commands_read)
        os.close(answers_write)
        self.buffer, self.last_id, self.events = b"", 0, []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.call(f"{domain}.enable", page=True)
        self.call("Emulation.setDeviceMetricsOverride", page=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def _message(self, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while b"\0" not in self.buffer:
            ready, _, _ = select.select([self._answers], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed its pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, page: bool = False, **params) -> dict:
        self.last_id += 1
        message = {"id": self.last_id, "method": method, "params": params}
        if page:
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._message()
            if answer.get("id") == self.last_id:
                assert "error" not in answer, f"{method}: {answer['error']}"
                return answer.get("result", {})
            self.events.append(answer)

    def open(self, url: str, timeout: float = 60) -> None:
        """Navigate to ``url`` and return once it has loaded (its own load, not an earlier page's)."""
        self.call("Page.navigate", page=True, url=url)
        deadline = time.monotonic() + timeout
        while self.evaluate("location.href + ' ' + document.readyState") != f"{url} complete":
            assert time.monotonic() < deadline, f"{url} did not load"
            time.sleep(0.05)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", page=True, expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def press(self, key: str) -> None:
        code, virtual, text = self.KEYS[key]
        down = {"type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": virtual}
        self.call("Input.dispatchKeyEvent", page=True, **(down if text is None else dict(down, text=text)))
        self.call("Input.dispatchKeyEvent", page=True, type="keyUp", key=key, code=code,
                  windowsVirtualKeyCode=virtual)

    def errors(self) -> list[str]:
        found = []
        for event in self.events:
            if event.get("method") == "Runtime.exceptionThrown":
                found.append(str(event["params"]["exceptionDetails"].get("exception", {}).get("description")))
            elif event.get("method") == "Runtime.consoleAPICalled" and event["params"]["type"] == "error":
                found.append(" ".join(str(a.get("value", a.get("description"))) for a in event["params"]["args"]))
        return found

    def requests(self) -> list[str]:
        return [event["params"]["request"]["url"] for event in self.events
                if event.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (EOFError, OSError, TimeoutError):
            pass
        finally:
            self.process.wait(timeout=60)
            os.close(self._commands)
            os.close(self._answers)
            shutil.rmtree(self.profile, ignore_errors=True)
