"""The issue's attacker: many clients POSTing large bodies to a webhook port, again and again.

`python flood_client.py HOST PORT SECONDS BYTES [CLIENTS [KIND]]` runs
CLIENTS (16) threads that each POST a body of about BYTES bytes over TLS (no
certificate check), one after another, for SECONDS; then prints one JSON
line: how the server answered (HTTP status, or the error that ended the
exchange) and how many times. KIND says what the body is:

* ``list`` (the default): ``[{},{},…]`` for 8 MiB and more (the issue's body),
  else ``[[],[],…]`` (a list of lists decodes into the most objects per byte
  a list allows, and lists are what Python's garbage collector walks), to
  ``/kinetic-job-spec``;
* ``review``: a well-formed review of a KineticBatch whose inline items are
  that list of lists, to ``/kinetic-batch-spec``: it gets past decoding to
  the operator's checks, the most a client can make a replica do.

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


def body_of(size: int, kind: str = "list") -> bytes:
    unit = b"{}," if size >= 8 << 20 and kind == "list" else b"[],"
    if kind == "list":
        return b"[" + unit * max(size // len(unit) - 1, 0) + unit[:-1] + b"]"
    head = json.dumps(
        {
            "kind": "AdmissionReview",
            "apiVersion": "admission.k8s.io/v1",
            "request": {
                "uid": "flood",
                "kind": {"group": "kinetic.dev", "version": "v1alpha1", "kind": "KineticBatch"},
                "resource": {
                    "group": "kinetic.dev",
                    "version": "v1alpha1",
                    "resource": "kineticbatches",
                },
                "namespace": "flood",
                "operation": "CREATE",
                "userInfo": {"username": "flood"},
                "object": {
                    "apiVersion": "kinetic.dev/v1alpha1",
                    "kind": "KineticBatch",
                    "metadata": {"name": "flood", "namespace": "flood"},
                    "spec": {
                        "template": {"container": {"command": ["true"]}},
                        "inputs": {"items": "ITEMS"},
                    },
                },
            },
        }
    ).encode()
    before, _, after = head.partition(b'"ITEMS"')
    count = max((size - len(head)) // len(unit), 1)
    return before + b"[" + unit * (count - 1) + unit[:-1] + b"]" + after


def post(host: str, port: int, body: bytes, path: str = "/kinetic-job-spec") -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection(host, port, timeout=30, context=context)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        answer.read()
        return str(answer.status)
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__
    finally:
        conn.close()


def flood(
    host: str, port: int, seconds: float, size: int, clients: int = 16, kind: str = "list"
) -> Counter[str]:
    body = body_of(size, kind)
    path = "/kinetic-batch-spec" if kind == "review" else "/kinetic-job-spec"
    answers: Counter[str] = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < deadline:
            said = post(host, port, body, path)
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
    kind = argv[5] if len(argv) > 5 else "list"
    answers = flood(host, port, seconds, size, clients, kind)
    print(json.dumps({"answers": dict(answers), "requests": sum(answers.values())}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
