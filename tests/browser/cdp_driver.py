#!/usr/bin/env python3
"""A tiny Chrome DevTools Protocol driver for BoltQ's browser tests. Standard library only.

The test (tests/browser/dashboard_browser.rs) starts Chromium itself with
`--remote-debugging-port=0`, reads the port Chromium chose from `DevToolsActivePort`, and
runs this script with that port:

    python3 cdp_driver.py <devtools-port>

Then it writes one JSON command per line on stdin and reads one JSON answer per line on
stdout: `{"ok": true, "value": ...}` or `{"ok": false, "error": "..."}`. Every command
carries its own `timeout_ms`; nothing here waits without a deadline. Commands:

- `open {url, width, height}`: attach to the first page target, set the viewport, navigate,
  and wait for the load event.
- `eval {expr}`: `Runtime.evaluate` (promises awaited); the value as JSON.
- `wait {expr, interval_ms}`: evaluates `expr` until it is truthy; the last value on timeout.
- `click {selector}`: scrolls the element into view and clicks its centre with real mouse
  events (`Input.dispatchMouseEvent`), after checking that the element is what a user would
  hit at that point (nothing covers it).
- `screenshot {path}`: full-page PNG written to `path`.
- `errors {}`: uncaught exceptions and console errors seen so far.
- `quit {}`: ends the script (the test kills Chromium).

The WebSocket client (RFC 6455) is written out below: one connection, text frames,
client-side masking, fragmented and 64-bit-length frames, ping/pong and close.
"""

import base64
import hashlib
import json
import os
import socket
import struct
import sys
import time
import urllib.request

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Timeout(Exception):
    pass


class WebSocket:
    """A minimal blocking WebSocket client; every read is bounded by a deadline."""

    def __init__(self, host, port, path, deadline):
        self.sock = socket.create_connection((host, port), timeout=_left(deadline))
        self.buf = bytearray()
        self.parts = []
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        request = (
            "GET %s HTTP/1.1\r\n"
            "Host: %s:%d\r\n"
            "Upgrade: websocket\r\n"
            "Connection: Upgrade\r\n"
            "Sec-WebSocket-Key: %s\r\n"
            "Sec-WebSocket-Version: 13\r\n"
            "\r\n" % (path, host, port, key)
        )
        self.sock.sendall(request.encode("ascii"))
        while b"\r\n\r\n" not in self.buf:
            self._fill(deadline)
        head, rest = bytes(self.buf).split(b"\r\n\r\n", 1)
        self.buf = bytearray(rest)
        lines = head.decode("latin-1").split("\r\n")
        if " 101 " not in lines[0] + " ":
            raise RuntimeError("WebSocket upgrade refused: %r" % lines[0])
        want = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        accept = [l.split(":", 1)[1].strip() for l in lines[1:] if l.lower().startswith("sec-websocket-accept:")]
        if accept != [want]:
            raise RuntimeError("bad Sec-WebSocket-Accept: %r" % accept)

    def _fill(self, deadline):
        self.sock.settimeout(_left(deadline))
        try:
            data = self.sock.recv(1 << 16)
        except socket.timeout:
            raise Timeout("no data from the browser in time")
        if not data:
            raise EOFError("the browser closed the DevTools connection")
        self.buf += data

    def _send_frame(self, opcode, payload):
        head = bytearray([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head.append(0x80 | n)
        elif n < 1 << 16:
            head.append(0x80 | 126)
            head += struct.pack(">H", n)
        else:
            head.append(0x80 | 127)
            head += struct.pack(">Q", n)
        mask = os.urandom(4)
        head += mask
        masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        self.sock.settimeout(10)
        self.sock.sendall(bytes(head) + masked)

    def send_text(self, text):
        self._send_frame(0x1, text.encode("utf-8"))

    def _take_frame(self):
        """Removes one whole frame from the buffer, or returns None (nothing is consumed
        until the frame is complete, so a timeout never leaves the stream mid-frame)."""
        b = self.buf
        if len(b) < 2:
            return None
        b0, b1 = b[0], b[1]
        n, pos = b1 & 0x7F, 2
        if n == 126:
            if len(b) < 4:
                return None
            n, pos = struct.unpack(">H", bytes(b[2:4]))[0], 4
        elif n == 127:
            if len(b) < 10:
                return None
            n, pos = struct.unpack(">Q", bytes(b[2:10]))[0], 10
        mask = None
        if b1 & 0x80:
            if len(b) < pos + 4:
                return None
            mask, pos = bytes(b[pos:pos + 4]), pos + 4
        if len(b) < pos + n:
            return None
        payload = bytes(b[pos:pos + n])
        del b[:pos + n]
        if mask:
            payload = bytes(x ^ mask[i & 3] for i, x in enumerate(payload))
        return b0 & 0x80, b0 & 0x0F, payload

    def recv_text(self, deadline):
        """The next whole text message (fragments joined); answers pings on the way."""
        while True:
            frame = self._take_frame()
            if frame is None:
                self._fill(deadline)
                continue
            fin, opcode, payload = frame
            if opcode == 0x8:
                raise EOFError("the browser sent a WebSocket close")
            if opcode == 0x9:
                self._send_frame(0xA, payload)
                continue
            if opcode == 0xA:
                continue
            self.parts.append(payload)
            if fin:
                text = b"".join(self.parts).decode("utf-8")
                self.parts = []
                return text


def _left(deadline):
    left = deadline - time.monotonic()
    if left <= 0:
        raise Timeout("deadline passed")
    return left


class Page:
    """One page target over CDP."""

    def __init__(self, devtools_port, deadline):
        target = None
        last = None
        while target is None:
            try:
                with urllib.request.urlopen(
                    "http://127.0.0.1:%d/json/list" % devtools_port, timeout=min(2.0, _left(deadline))
                ) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
                if pages:
                    target = pages[0]
                    break
            except Timeout:
                raise
            except Exception as e:  # Chromium still starting
                last = e
            if time.monotonic() + 0.1 > deadline:
                raise Timeout("no page target in /json/list (last error: %r)" % (last,))
            time.sleep(0.1)
        url = target["webSocketDebuggerUrl"]
        assert url.startswith("ws://"), url
        hostport, path = url[len("ws://"):].split("/", 1)
        host, port = hostport.rsplit(":", 1)
        self.ws = WebSocket(host, int(port), "/" + path, deadline)
        self.next_id = 0
        self.loaded = False
        self.exceptions = []
        self.console_errors = []

    def _event(self, msg):
        method = msg.get("method")
        params = msg.get("params", {})
        if method == "Page.loadEventFired":
            self.loaded = True
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            exc = d.get("exception", {})
            self.exceptions.append(exc.get("description") or d.get("text") or json.dumps(d))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            args = params.get("args", [])
            self.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
        elif method == "Log.entryAdded":
            e = params.get("entry", {})
            if e.get("level") == "error":
                self.console_errors.append("%s: %s %s" % (e.get("source"), e.get("text"), e.get("url", "")))

    def call(self, method, deadline, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send_text(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv_text(deadline))
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError("%s failed: %s" % (method, json.dumps(msg["error"])))
                return msg.get("result", {})
            if "method" in msg:
                self._event(msg)

    def pump_until(self, cond, deadline):
        """Handles events until `cond()` holds."""
        while not cond():
            msg = json.loads(self.ws.recv_text(deadline))
            if "method" in msg:
                self._event(msg)

    def evaluate(self, expr, deadline):
        r = self.call(
            "Runtime.evaluate",
            deadline,
            expression=expr,
            returnByValue=True,
            awaitPromise=True,
            timeout=int(max(1, _left(deadline) * 1000)),
        )
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise RuntimeError("script threw: %s" % (d.get("exception", {}).get("description") or d.get("text")))
        return r.get("result", {}).get("value")


def cmd_open(page, c, deadline):
    page.call("Page.enable", deadline)
    page.call("Runtime.enable", deadline)
    page.call("Log.enable", deadline)
    page.call(
        "Emulation.setDeviceMetricsOverride",
        deadline,
        width=int(c.get("width", 1280)),
        height=int(c.get("height", 900)),
        deviceScaleFactor=1,
        mobile=False,
    )
    page.loaded = False
    r = page.call("Page.navigate", deadline, url=c["url"])
    if r.get("errorText"):
        raise RuntimeError("navigation failed: %s" % r["errorText"])
    page.pump_until(lambda: page.loaded, deadline)
    return page.evaluate("location.href", deadline)


def cmd_wait(page, c, deadline):
    interval = c.get("interval_ms", 100) / 1000.0
    last = None
    while True:
        last = page.evaluate(c["expr"], deadline)
        if last:
            return last
        if time.monotonic() + interval >= deadline:
            raise Timeout("condition not met in time; last value: %s" % json.dumps(last))
        time.sleep(interval)


# Scrolls the element into view and returns its centre, or why it cannot be clicked.
CLICK_PROBE = r"""
(() => {
  const el = document.querySelector(%s);
  if (!el) return {error: 'no element matches the selector'};
  el.scrollIntoView({block: 'center', inline: 'center'});
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) return {error: 'element has no size (hidden?)'};
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  const hit = document.elementFromPoint(x, y);
  if (!hit || !(hit === el || el.contains(hit)))
    return {error: 'element is covered by ' + (hit ? hit.outerHTML.slice(0, 120) : 'nothing')};
  return {x, y};
})()
"""


def cmd_click(page, c, deadline):
    probe = CLICK_PROBE % json.dumps(c["selector"])
    while True:
        at = page.evaluate(probe, deadline)
        if at and "error" not in at:
            break
        if time.monotonic() + 0.1 >= deadline:
            raise Timeout("cannot click %s: %s" % (c["selector"], at and at.get("error")))
        time.sleep(0.1)
    x, y = at["x"], at["y"]
    page.call("Input.dispatchMouseEvent", deadline, type="mouseMoved", x=x, y=y)
    for kind in ("mousePressed", "mouseReleased"):
        page.call("Input.dispatchMouseEvent", deadline, type=kind, x=x, y=y, button="left", buttons=1, clickCount=1)
    return at


def cmd_screenshot(page, c, deadline):
    # From the top: a full-page capture of a scrolled page draws sticky headers mid-page.
    page.evaluate("window.scrollTo(0, 0); new Promise((r) => requestAnimationFrame(() => r(true)))", deadline)
    m = page.call("Page.getLayoutMetrics", deadline)
    size = m.get("cssContentSize") or m.get("contentSize")
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    r = page.call("Page.captureScreenshot", deadline, format="png", captureBeyondViewport=True, clip=clip)
    data = base64.b64decode(r["data"])
    path = c["path"]
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return {"bytes": len(data), "width": size["width"], "height": size["height"]}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: cdp_driver.py <devtools-port>")
    port = int(sys.argv[1])
    page = None
    for line in sys.stdin:
        if not line.strip():
            continue
        c = json.loads(line)
        op = c.get("op")
        deadline = time.monotonic() + c.get("timeout_ms", 10000) / 1000.0
        try:
            if op == "quit":
                print(json.dumps({"ok": True, "value": None}), flush=True)
                return
            if page is None:
                page = Page(port, deadline)
            if op == "open":
                value = cmd_open(page, c, deadline)
            elif op == "eval":
                value = page.evaluate(c["expr"], deadline)
            elif op == "wait":
                value = cmd_wait(page, c, deadline)
            elif op == "click":
                value = cmd_click(page, c, deadline)
            elif op == "screenshot":
                value = cmd_screenshot(page, c, deadline)
            elif op == "errors":
                value = {"exceptions": page.exceptions, "console_errors": page.console_errors}
            else:
                raise RuntimeError("unknown op %r" % op)
            answer = {"ok": True, "value": value}
        except (Timeout, EOFError, RuntimeError, OSError, KeyError, ValueError) as e:
            answer = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
