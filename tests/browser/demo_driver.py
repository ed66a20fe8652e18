#!/usr/bin/env python3
"""A multi-tab Chrome DevTools Protocol driver for the chat demo's browser test
(tests/browser/demo_browser.rs). Standard library only; it reuses the WebSocket client, the page
wrapper and the commands of cdp_driver.py (same folder) and adds tabs:

    python3 demo_driver.py <devtools-port>

One JSON command per line on stdin, one JSON answer per line on stdout, as in cdp_driver.py.
Every command names its tab (`"tab": "alice"`); the first tab named takes the page Chromium
opened, each new name opens a new tab (`PUT /json/new`). Before a command runs, its tab is
brought to the front, so a tab's timers are never throttled as a background tab's are.
Commands: those of cdp_driver.py (`open`, `eval`, `wait`, `click`, `screenshot`, `errors`,
`quit`) plus:

- `type {selector, text}`: focuses the element and inserts `text` as typed input (the page
  receives `input` events).
- `reload {}`: reloads the tab and waits for the load event; the tab keeps its
  sessionStorage, as after a user's reload.
"""

import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cdp_driver as cdp  # noqa: E402


class Tab(cdp.Page):
    """A page target chosen by the caller (cdp_driver.Page always takes the first one)."""

    def __init__(self, target, deadline):
        url = target["webSocketDebuggerUrl"]
        assert url.startswith("ws://"), url
        hostport, path = url[len("ws://"):].split("/", 1)
        host, port = hostport.rsplit(":", 1)
        self.ws = cdp.WebSocket(host, int(port), "/" + path, deadline)
        self.next_id = 0
        self.loaded = False
        self.exceptions = []
        self.console_errors = []


def list_pages(port, deadline):
    with urllib.request.urlopen(
        "http://127.0.0.1:%d/json/list" % port, timeout=min(2.0, cdp._left(deadline))
    ) as r:
        return [t for t in json.load(r) if t.get("type") == "page"]


def new_target(port, deadline):
    req = urllib.request.Request("http://127.0.0.1:%d/json/new?about:blank" % port, method="PUT")
    with urllib.request.urlopen(req, timeout=min(5.0, cdp._left(deadline))) as r:
        return json.load(r)


def first_target(port, deadline):
    last = None
    while True:
        try:
            pages = list_pages(port, deadline)
            if pages:
                return pages[0]
        except cdp.Timeout:
            raise
        except Exception as e:  # Chromium still starting
            last = e
        if time.monotonic() + 0.1 > deadline:
            raise cdp.Timeout("no page target in /json/list (last error: %r)" % (last,))
        time.sleep(0.1)


def cmd_type(tab, c, deadline):
    focused = tab.evaluate(
        "(() => { const el = document.querySelector(%s); if (!el) return false; el.focus(); return true; })()"
        % json.dumps(c["selector"]),
        deadline,
    )
    if not focused:
        raise RuntimeError("no element matches %s" % c["selector"])
    tab.call("Input.insertText", deadline, text=c["text"])
    return True


def cmd_reload(tab, c, deadline):
    tab.loaded = False
    tab.call("Page.reload", deadline, ignoreCache=False)
    tab.pump_until(lambda: tab.loaded, deadline)
    return tab.evaluate("location.href", deadline)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: demo_driver.py <devtools-port>")
    port = int(sys.argv[1])
    tabs = {}
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
            name = c.get("tab", "main")
            tab = tabs.get(name)
            if tab is None:
                target = first_target(port, deadline) if not tabs else new_target(port, deadline)
                tab = Tab(target, deadline)
                tabs[name] = tab
            tab.call("Page.bringToFront", deadline)
            if op == "open":
                value = cdp.cmd_open(tab, c, deadline)
            elif op == "eval":
                value = tab.evaluate(c["expr"], deadline)
            elif op == "wait":
                value = cdp.cmd_wait(tab, c, deadline)
            elif op == "click":
                value = cdp.cmd_click(tab, c, deadline)
            elif op == "type":
                value = cmd_type(tab, c, deadline)
            elif op == "reload":
                value = cmd_reload(tab, c, deadline)
            elif op == "screenshot":
                value = cdp.cmd_screenshot(tab, c, deadline)
            elif op == "errors":
                value = {"exceptions": tab.exceptions, "console_errors": tab.console_errors}
            else:
                raise RuntimeError("unknown op %r" % op)
            answer = {"ok": True, "value": value}
        except (cdp.Timeout, EOFError, RuntimeError, OSError, KeyError, ValueError) as e:
            answer = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
