"""Starting Spark for the hanet jobs: Java checked first, quiet logs, one line saying what runs.

:func:`spark_session` returns ``SparkSession.builder.getOrCreate()`` with the ``commitlog``
and ``consumequeue`` formats registered. A session already running in the process is reused
as it is. Under ``spark-submit`` (``PYSPARK_PYTHON=.venv/bin/python spark-submit --master URL
path/to/hanet/__main__.py audit STORE``) the master and settings are spark-submit's;
otherwise the session starts on ``master`` (``local[*]`` by default; ``spark://``, ``yarn``
or ``k8s://`` masters work the same way).

For a local master it points Spark's Python workers at this interpreter (``PYSPARK_PYTHON``,
unless set) so that they import this ``hanet``, and binds the driver to the loopback address
(``SPARK_LOCAL_IP``, unless set). The driver JVM logs through ``log4j2.properties`` next to
this module: warnings and errors on a terminal.

When stdout or stderr is not a terminal (a pipe, a file, a CI log) it is quiet: no console
progress bar (``spark.ui.showConsoleProgress`` false), the JVM logs errors only, and the JVM's
own start-up notice (``WARNING: Using incubator modules``, which Spark's launcher always asks
for) is dropped from its stderr, which is otherwise passed on as it is.

A ``spark://`` master is checked with a plain TCP connect (:data:`MASTER_CONNECT_TIMEOUT`)
before the JVM starts: Spark's standalone client would otherwise retry an unreachable master
for a minute before giving up.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

import pyspark
from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkException
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from hanet.errors import HanetError

from ._cds import CdsPlan, cds_plan
from ._source import register

__all__ = [
    "JAVA_HINT",
    "MASTER_CONNECT_TIMEOUT",
    "QUICK_JVM_OPTIONS",
    "QUICK_SHUFFLE_PARTITIONS",
    "QUICK_SQL_SETTINGS",
    "SparkUnavailableError",
    "check_master",
    "connect_session",
    "describe",
    "java_problem",
    "spark_session",
]

JAVA_HINT = (
    "Spark needs a Java runtime (17 or 21). Install one, e.g. "
    "`sudo apt-get install openjdk-17-jre-headless` (Debian/Ubuntu), "
    "`brew install openjdk@17` (macOS) or `make java` in the hanet checkout, "
    "then make sure `java` is on PATH or JAVA_HOME points at it."
)
"""What to tell a user whose machine has no Java."""

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
MASTER_CONNECT_TIMEOUT = 5.0
"""Seconds :func:`check_master` waits for a ``spark://`` master to accept a connection."""
_JVM_NOTICES = (b"WARNING: Using incubator modules",)
_CONNECT_CLIENT = ("pandas", "numpy", "grpc", "grpc_status", "zstandard")
"""What pyspark's Spark Connect client imports (``pip install 'pyspark[connect]'``)."""
QUICK_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""JVM options for a short job (``spark_session(quick=True)``): the JIT compiles with C1 only
(a short job's first queries are mostly JIT and class loading; C2 would compete for the cores
and rarely pays off before the job ends) and the serial collector (no GC threads). The driver
JVM also maps Spark's classes from a class data sharing archive (:mod:`hanet.spark._cds`)."""


QUICK_SHUFFLE_PARTITIONS = 1
"""Shuffle partitions of a short job (``spark_session(quick=True)``,
``connect_session(quick=True)``): its stores were read in the driver into one partition, and
each more partition of a shuffle is tasks to schedule and, for a sort, a sampling job."""
QUICK_SQL_SETTINGS = {
    "spark.sql.shuffle.partitions": str(QUICK_SHUFFLE_PARTITIONS),
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
"""Spark SQL settings of a short job's local session: one shuffle partition, and expressions
evaluated as they are instead of compiled to Java (Spark's interpreted mode, same results):
in a JVM that just started, compiling a query's generated code (Janino, itself not yet
JIT-compiled) costs more than running it over a few thousand rows. Measured on a 5,000-message
audit: 15 % less CPU in the driver JVM. A Spark Connect session of a short job uses them too
(``connect_session(quick=True)``): a server's first audits ran in 10-18 s instead of 14-23 s,
later ones as fast either way."""


class SparkUnavailableError(HanetError):
    """Spark cannot start here (no Java, or the JVM did not come up)."""


def java_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """Why Spark cannot find Java (with :data:`JAVA_HINT`), or None when it can."""
    env = os.environ if environ is None else environ
    java_home = env.get("JAVA_HOME")
    if java_home:
        if (Path(java_home) / "bin" / "java").exists():
            return None
        return f"JAVA_HOME={java_home} has no bin/java. {JAVA_HINT}"
    if shutil.which("java", path=env.get("PATH")) is not None:
        return None
    return f"no `java` on PATH and JAVA_HOME is not set. {JAVA_HINT}"


def spark_session(
    master: str | None = None,
    *,
    app_name: str = "hanet",
    config: Mapping[str, str] | None = None,
    quick: bool = False,
    sources: bool = True,
) -> SparkSession:
    """A Spark session for the hanet jobs, with the data sources registered.

    Args:
        master: the Spark master; None means spark-submit's under spark-submit, else
            ``local[*]``. Ignored when a session already runs in this process.
        app_name: the application name.
        config: more Spark settings; they win over hanet's defaults (UTC session time zone,
            console progress bar on a terminal only, quiet driver logs, shuffle partitions of
            twice the local cores; none of them under spark-submit).
        quick: start for a short job (:data:`QUICK_JVM_OPTIONS` for the driver JVM and
            Spark's launcher, no Spark UI, :data:`QUICK_SQL_SETTINGS`): seconds less to
            start and to plan the first queries, slower on long ones. Ignored under
            spark-submit and when a session runs.
        sources: register the data sources now (else the jobs do when they first read
            through them: a few seconds saved when every store is read in the driver).

    Raises:
        SparkUnavailableError: no Java, an unreachable ``spark://`` master, or the JVM did not
            start (the message says why).
    """
    running = SparkSession.getActiveSession()
    if running is None:
        running = _start(master, app_name, config or {}, quick)
    running.sparkContext.setLogLevel("WARN" if _interactive() else "ERROR")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # py4j logs every connection at INFO
    if sources:
        register(running)
    return running


def _start(
    master: str | None, app_name: str, config: Mapping[str, str], quick: bool
) -> SparkSession:
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # inside spark-submit: its JVM runs
    settings: dict[str, str] = {}
    cds: CdsPlan | None = None
    if not submitted:  # spark-submit's own settings (--master, --conf ...) stay as they are
        problem = java_problem()
        if problem is not None:
            raise SparkUnavailableError(problem)
        master = master or "local[*]"
        check_master(master)
        level = "warn" if _interactive() else "error"
        log4j = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
        java_options = f"{log4j} -Dhanet.spark.log={level}"
        settings = {
            "spark.ui.showConsoleProgress": str(_interactive()).lower(),
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.extraJavaOptions": java_options,
        }
        if quick:
            cds = cds_plan(pyspark.__version__, spark_home=str(Path(pyspark.__file__).parent))
            quick_options = " ".join((*QUICK_JVM_OPTIONS, *cds.options))
            settings["spark.driver.extraJavaOptions"] += " " + quick_options
            settings["spark.ui.enabled"] = "false"
            os.environ.setdefault("SPARK_LAUNCHER_OPTS", " ".join(QUICK_JVM_OPTIONS))
    if master is not None and master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings["spark.sql.shuffle.partitions"] = str(2 * _local_cores(master))
    if quick and not submitted:
        settings.update(QUICK_SQL_SETTINGS)
    settings.update(config)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        if not submitted and not _interactive() and _no_jvm_yet():
            conf = SparkConf().setAppName(app_name).setAll(list(settings.items()))
            if master is not None:
                conf.setMaster(master)
            SparkContext(conf=conf, gateway=_launch_filtered(conf))
        session = builder.getOrCreate()
        if cds is not None:
            process = getattr(SparkContext._gateway, "proc", None)
            if process is not None:
                cds.launched(process.pid)
        return session
    except PySparkException as exc:
        raise SparkUnavailableError(f"Spark did not start: {exc}\n{JAVA_HINT}") from exc
    except Py4JError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SparkUnavailableError(f"Spark did not start on {master}: {first}") from exc


def check_master(master: str, timeout: float = MASTER_CONNECT_TIMEOUT) -> None:
    """Fail fast on a ``spark://host:port[,host:port...]`` master none of whose hosts accepts a
    TCP connection within ``timeout`` seconds; other masters are not checked.

    Raises:
        SparkUnavailableError: no host of the master could be reached (the message says why).
    """
    if not master.startswith("spark://"):
        return
    reasons = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit():
            raise SparkUnavailableError(f"bad Spark master {master!r}: want spark://HOST:PORT")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return
        except OSError as exc:
            reasons.append(f"{address}: {exc.strerror or exc or type(exc).__name__}")
    raise SparkUnavailableError(f"cannot reach the Spark master {master} ({'; '.join(reasons)})")


def _interactive() -> bool:
    """Both stdout and stderr are terminals (a progress bar and warnings are for a person)."""
    streams = (sys.stdout, sys.stderr)
    return all(stream is not None and stream.isatty() for stream in streams)


def _no_jvm_yet() -> bool:
    """No Spark JVM runs in this process yet (a stopped session leaves its JVM up)."""
    return getattr(SparkContext, "_gateway", None) is None


def _launch_filtered(conf: SparkConf) -> object:
    """Start Spark's JVM with its stderr passed on by a thread that drops the start-up notices
    (:data:`_JVM_NOTICES`); the gateway, as ``pyspark.java_gateway.launch_gateway`` returns."""
    read_end, write_end = os.pipe()
    thread = threading.Thread(
        target=_pass_on, args=(read_end,), name="hanet-spark-stderr", daemon=True
    )
    thread.start()
    try:
        return launch_gateway(conf, popen_kwargs={"stderr": write_end})  # type: ignore[no-untyped-call]
    finally:
        os.close(write_end)  # the JVM holds its own copy; EOF when it exits


def _pass_on(fd: int) -> None:
    with open(fd, "rb") as source:
        for line in iter(source.readline, b""):
            if not line.startswith(_JVM_NOTICES):
                os.write(2, line)


def _local_cores(master: str) -> int:
    inside = master.partition("[")[2].partition("]")[0].partition(",")[0]
    if inside.isdigit():
        return max(1, int(inside))
    return os.cpu_count() or 1


def connect_session(remote: str, *, quick: bool = False) -> SparkSession:
    """A session on a running Spark Connect server (``sc://HOST:PORT``), for the hanet jobs.

    The jobs run there as they do locally; a store of at most ``driver_rows`` rows is read
    here and sent as Arrow, a larger one is read by the server's executors through the data
    sources (registered over Connect when first used: the server's Python workers must import
    ``hanet``). Needs pyspark's Connect client (``pip install 'hanet[connect]'``).

    The session (each Connect client has its own settings on the server) uses UTC, as a local
    one does; with ``quick`` (a short job, its stores read here) it has
    :data:`QUICK_SQL_SETTINGS`: among them :data:`QUICK_SHUFFLE_PARTITIONS` partitions, as the
    audit caches tables built by shuffles, whose partitions adaptive execution does not
    coalesce, and a server's default of 200 made a 5,000-message audit seconds slower.

    Raises:
        SparkUnavailableError: no Connect client installed, or the server did not answer.
    """
    missing = [name for name in _CONNECT_CLIENT if importlib.util.find_spec(name) is None]
    if missing:  # pyspark.sql.connect checks them on import, and may exit rather than raise
        raise SparkUnavailableError(
            "--remote needs pyspark's Spark Connect client: pip install 'hanet[connect]' "
            f"(missing: {', '.join(missing)})"
        )
    address = remote.removeprefix("sc://").split("/")[0].split(";")[0]
    host, _, port = address.rpartition(":")
    if not remote.startswith("sc://") or not host or not port.isdigit():
        raise SparkUnavailableError(f"bad Spark Connect URL {remote!r}: want sc://HOST:PORT")
    try:  # the client would retry an unreachable server for minutes
        with socket.create_connection((host.strip("[]"), int(port)), MASTER_CONNECT_TIMEOUT):
            pass
    except OSError as exc:
        reason = exc.strerror or exc or type(exc).__name__
        raise SparkUnavailableError(f"cannot reach Spark Connect at {remote} ({reason})") from exc
    try:
        session = SparkSession.builder.remote(remote).getOrCreate()
        session.conf.set("spark.sql.session.timeZone", "UTC")  # the first call to the server
        if quick:
            for key, value in QUICK_SQL_SETTINGS.items():
                session.conf.set(key, value)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SparkUnavailableError(f"cannot use Spark Connect at {remote}: {first}") from exc
    return session


def describe(spark: SparkSession) -> str:
    """``Spark 4.3.0 on local[*] with 2 cores``: which Spark, where, how many cores
    (``Spark 4.3.0 over Spark Connect`` for a Connect session)."""
    if not hasattr(spark, "_jsc"):  # a Spark Connect session has no SparkContext here
        return f"Spark {spark.version} over Spark Connect"
    context = spark.sparkContext
    cores = context.defaultParallelism
    return f"Spark {spark.version} on {context.master} with {cores} core{'s' * (cores != 1)}"
