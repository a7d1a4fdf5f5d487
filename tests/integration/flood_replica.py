"""One operator replica as the chart runs it, with its event loop's lag written down.

`python tests/integration/flood_replica.py LAG_FILE [operator arguments]` runs
`python -m kinetic_operator [operator arguments]` (the chart's command) in this
process, and beside it, on the same event loop, a task that sleeps 10 ms at a
time and appends how late each wake-up was (``time lag`` in seconds, one line
each) to LAG_FILE. A loop blocked for 200 ms shows as one line of 0.2.

Used by `test_webhook_replica_flood.py`; not a test itself.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from kinetic_operator import __main__ as entry

TICK = 0.01


async def record_lag(path: str) -> None:
    """Append each tick's lateness to ``path``, flushing every half second."""
    loop = asyncio.get_running_loop()
    lines: list[str] = []
    flushed = loop.time()
    with open(path, "a") as out:
        while True:
            before = loop.time()
            await asyncio.sleep(TICK)
            now = loop.time()
            lines.append(f"{time.time():.3f} {now - before - TICK:.4f}\n")
            if now - flushed > 0.5:
                out.writelines(lines)
                out.flush()
                lines.clear()
                flushed = now


def main() -> None:
    lag_file, argv = sys.argv[1], sys.argv[2:]
    run_elected = entry.run_elected

    async def with_lag(*args: Any) -> None:
        recorder = asyncio.create_task(record_lag(lag_file))
        try:
            await run_elected(*args)
        finally:
            recorder.cancel()

    entry.run_elected = with_lag  # type: ignore[assignment]
    entry.main(argv)


if __name__ == "__main__":
    main()
