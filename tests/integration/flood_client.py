"""The issue's attacker: many clients POSTing large bodies to a webhook port, again and again.

`python flood_client.py HOST PORT SECONDS BYTES [CLIENTS]` runs CLIENTS (16)
threads that each POST a body of about BYTES bytes to
``https://HOST:PORT/kinetic-job-spec`` over TLS (no certificate check), one
after another, for SECONDS; then prints one JSON line: how the server
answered (HTTP status, or the error that ended the exchange) and how many
times. The body is ``[{},{},…]`` for 8 MiB and more (the issue's), else
``[[],[],…]``: a list of lists decodes into the most objects per byte that a
list allows, and lists are what Python's garbage collector walks.

Standard library only: the live test runs this file in a Pod (`python -c`).
"""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import threading
import time
from collections import Counter


def body_of(size: int) -> bytes:
    unit = b"{}," if size >= 8 << 20 else b"[],"
    return b"[" + unit * max(size // len(unit) - 1, 0) + unit[:-1] + b"]"


def post(host: str, port: int, body: bytes) -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection(host, port, timeout=30, context=context)
    try:
        conn.request(
            "POST", "/kinetic-job-spec", body=body, headers={"Content-Type": "application/json"}
        )
        answer = conn.getresponse()
        answer.read()
        return str(answer.status)
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__
    finally:
        conn.close()


def flood(host: str, port: int, seconds: float, size: int, clients: int = 16) -> Counter[str]:
    body = body_of(size)
    answers: Counter[str] = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < deadline:
            said = post(host, port, body)
            with lock:
                answers[said] += 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def main(argv: list[str]) -> None:
    host, port, seconds, size = argv[0], int(argv[1]), float(argv[2]), int(argv[3])
    clients = int(argv[4]) if len(argv) > 4 else 16
    answers = flood(host, port, seconds, size, clients)
    print(json.dumps({"answers": dict(answers), "requests": sum(answers.values())}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
