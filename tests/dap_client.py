"""A minimal Debug Adapter Protocol client, for tests that check a debugger can attach.

Speaks the protocol itself (Content-Length framed JSON over TCP), so a test
proves that what listens is a debug adapter, not just an open port.
"""

from __future__ import annotations

import json
import socket
from typing import Any


class DapClient:
    """One connection to a debug adapter; requests are numbered from 1."""

    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.reader = self.sock.makefile("rb")
        self.seq = 0

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def __enter__(self) -> DapClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, command: str, arguments: dict[str, Any] | None = None) -> int:
        self.seq += 1
        body = json.dumps(
            {"seq": self.seq, "type": "request", "command": command, "arguments": arguments or {}}
        ).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self.seq

    def read(self) -> dict[str, Any]:
        """The next message (response or event)."""
        length = None
        while True:
            line = self.reader.readline()
            if not line:
                raise ConnectionError("the debug adapter closed the connection")
            line = line.strip()
            if not line:
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise ValueError("a DAP message without Content-Length")
        return json.loads(self.reader.read(length))

    def until(self, *, response_to: int | None = None, event: str | None = None) -> dict[str, Any]:
        """Read until the response to request `response_to`, or the event named `event`."""
        while True:
            msg = self.read()
            if response_to is not None and msg.get("type") == "response":
                if msg.get("request_seq") == response_to:
                    return msg
            if event is not None and msg.get("type") == "event" and msg.get("event") == event:
                return msg

    def initialize(self) -> dict[str, Any]:
        seq = self.send(
            "initialize",
            {"clientID": "kinetic-tests", "adapterID": "debugpy", "pathFormat": "path"},
        )
        return self.until(response_to=seq)

    def attach_and_go(self) -> None:
        """attach, then configurationDone: what lets a waiting debuggee run on."""
        attach = self.send("attach", {"justMyCode": True})
        self.until(event="initialized")
        done = self.send("configurationDone")
        self.until(response_to=done)
        self.until(response_to=attach)
