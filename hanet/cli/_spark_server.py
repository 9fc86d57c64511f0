"""``hanet spark-connect``: a Spark Connect server for ``--remote``, until Ctrl-C or SIGTERM
(imports pyspark: ``hanet.cli._spark`` imports this module only when the verb runs).

``hanet spark-connect [--listen 127.0.0.1:15002] [--spark-master local[*]]`` starts the Spark
Connect server the installed pyspark ships (:func:`hanet.spark.start_connect_server`: its
Python workers are this interpreter, so ``hanet`` is importable there), prints one line on
stdout when it accepts connections (``Spark Connect on sc://HOST:PORT ...``; ``--listen
HOST:0`` picks a free port), and keeps it running: ``hanet audit|diff|stats ... --remote
sc://HOST:PORT`` then reuse one warm Spark instead of starting their own. Ctrl-C (exit status
130) or SIGTERM (0) stops it; a server that exits by itself is exit status 2. Its log
(warnings and errors) goes to stderr.

A Connect server runs the queries its clients send, Python included: listen on loopback (the
default) or on an address only trusted users reach.
"""

from __future__ import annotations

import argparse
import signal
import sys

import trio

from hanet.boot import run_until_stopped
from hanet.spark import ConnectServerError, start_connect_server

from ._support import fail, interrupted, stop_status

__all__ = ["serve"]


async def serve(args: argparse.Namespace) -> int:
    """Run the server until a signal (see the module docstring); the exit status."""
    host, port = args.listen
    master = args.spark_master or "local[*]"
    sys.stderr.flush()
    # Blocking: Spark's start-up is all this process does meanwhile. A SIGTERM then is an
    # exception too (Python's default would end the process and leave the server running).
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        server = start_connect_server(port, host=host, master=master, log=sys.stderr.buffer)
    except ConnectServerError as exc:
        return fail(str(exc))
    finally:
        signal.signal(signal.SIGTERM, previous)
    with server:
        print(
            f"Spark Connect on {server.url} (Spark master {master}); run the jobs on it with "
            f"hanet audit|diff|stats ... --remote {server.url}",
            flush=True,
        )

        async def wait_exit() -> None:  # a signal abandons the thread: stop() ends its wait
            await trio.to_thread.run_sync(server.process.wait, abandon_on_cancel=True)

        received = await run_until_stopped(wait_exit)
        if received is None:
            return fail(f"the Spark Connect server exited with status {server.process.returncode}")
    return interrupted(stop_status(received))


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(0)  # the server it was starting is stopped on the way out
