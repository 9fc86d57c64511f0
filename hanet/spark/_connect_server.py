"""A Spark Connect server started from the installed pyspark, for ``--remote sc://HOST:PORT``.

A Spark Connect server is one long-running Spark driver that clients send their queries to
over gRPC: the JVM, Spark's classes and its JIT-compiled code stay warm between jobs, so a
repeated ``hanet audit --remote sc://...`` pays none of Spark's start-up. pyspark 4's wheel
ships the server (``jars/spark-connect_*.jar``): :func:`start_connect_server` runs it with
``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`` (what
pyspark's ``sbin/start-connect-server.sh`` does, without daemonizing) and returns once it
accepts connections.

The server is set up for the hanet jobs: its Python workers are this interpreter (so the
``commitlog`` data source registered over Connect imports this ``hanet``), it listens on
``host`` only (loopback by default: a Connect server runs whatever its clients send, so do not
expose it beyond who may run code on this machine), sessions default to UTC, shuffles to
twice the local cores, no Spark UI, warnings and errors only in its log.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

import attrs
import pyspark

from hanet.errors import HanetError

__all__ = ["CONNECT_SERVER_CLASS", "ConnectServer", "ConnectServerError", "start_connect_server"]

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_LOG4J = Path(__file__).with_name("log4j2.properties")


class ConnectServerError(HanetError):
    """The Spark Connect server did not start (the message says why; its output went to the
    ``log`` given to :func:`start_connect_server`)."""


@attrs.define
class ConnectServer:
    """A running Spark Connect server (a context manager that stops it).

    Attributes:
        url: ``sc://HOST:PORT``, what ``--remote`` takes.
        process: the server's process (its own process group).
    """

    url: str
    process: subprocess.Popen[bytes]

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server (SIGTERM to its process group, SIGKILL after ``timeout`` s)."""
        if self.process.poll() is None:
            _signal_group(self.process, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(self.process, signal.SIGKILL)
                self.process.wait()

    def __enter__(self) -> ConnectServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now on ``host``."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _local_cores(master: str) -> int:
    inside = master.partition("[")[2].partition("]")[0].partition(",")[0]
    return max(1, int(inside)) if inside.isdigit() else (os.cpu_count() or 1)


def start_connect_server(
    port: int = 0,
    *,
    host: str = "127.0.0.1",
    master: str = "local[*]",
    config: Mapping[str, str] | None = None,
    log: IO[bytes] | None = None,
    timeout: float = 120.0,
) -> ConnectServer:
    """Start a Spark Connect server from the installed pyspark; return when it accepts
    connections on ``host:port`` (``port`` 0: a free one).

    Args:
        port: the gRPC port (Spark Connect's usual one is 15002).
        host: the address it listens on (and ``SPARK_LOCAL_IP``).
        master: its Spark master.
        config: more Spark settings (they win over the ones above).
        log: where its stdout and stderr go (default: discarded).
        timeout: seconds to wait for it to accept connections.

    Raises:
        ConnectServerError: no Java, ``host:port`` taken, or it exited or did not listen within
            ``timeout``.
    """
    from ._session import java_problem  # noqa: PLC0415 - imports the session machinery

    problem = java_problem()
    if problem is not None:
        raise ConnectServerError(problem)
    port = port or free_port(host)
    if _listening(host, port):
        raise ConnectServerError(f"{host}:{port} is taken: something listens there already")
    spark_home = Path(pyspark.__file__).parent
    java_options = f"-Dlog4j2.configurationFile={_LOG4J.as_uri()} -Dhanet.spark.log=warn"
    settings = {
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.port.maxRetries": "0",  # that port or none (not the next one)
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": java_options,
    }
    if master.startswith("local"):
        settings["spark.sql.shuffle.partitions"] = str(2 * _local_cores(master))
    settings.update(config or {})
    command = [str(spark_home / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS]
    command += ["--name", "hanet Spark Connect", "--master", master]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    env = dict(os.environ)
    env.pop("PYSPARK_GATEWAY_PORT", None)  # not a child of this process's own Spark
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    env.update(SPARK_HOME=str(spark_home), SPARK_LOCAL_IP=host)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    process = subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log if log is not None else subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = ConnectServer(url=f"sc://{host}:{port}", process=process)
    try:
        _wait_listening(server, host, port, timeout)
    except BaseException:  # a Ctrl-C while it starts too: no server left behind
        server.stop()
        raise
    return server


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _wait_listening(server: ConnectServer, host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if _listening(host, port):
            return
        status = server.process.poll()
        if status is not None or time.monotonic() > deadline:
            why = f"exited with status {status}" if status is not None else "did not listen"
            raise ConnectServerError(
                f"the Spark Connect server on {host}:{port} {why} within {timeout:.0f} s"
            )
        time.sleep(0.2)
