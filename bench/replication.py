"""Replication throughput: hanet master -> slave vs a raw trio per-frame copy, same bytes.

Usage::

    python bench/replication.py [--size-mib 1024] [--rounds 2] [--tls]

A master store of ``--size-mib`` of 1 KiB messages is generated once under ``bench/out/``.
Each round, in alternating order:

- hanet: a master process (``HAMaster`` over the store) and a slave process (``HASlave`` into a
  fresh store that validates every record and builds its consume queues), full sync from the
  first file; timed from the moment the slave has stored its first transfer (a store listener:
  receiving and storing that first transfer is not counted) until its last byte is stored and
  its consume queues hold every record (the slave's store runs as a broker runs it: flusher
  and the next file made ahead of need).
- sendfile: hanet again with the master sending each transfer body with ``sendfile`` from its
  file (``ha_sendfile=True``) instead of the mapped bytes (the default); each hanet round also
  reports the master's and the slave's CPU seconds per GB sent.
- raw: the same files sent by a plain trio sender, one ``send_all`` per 12-byte header + 32 KiB
  frame, to a plain trio receiver that counts bytes (no store, no checks).
- iperf3 (if installed): the loopback ceiling.

Before each round the master's files are read once, so every round sends them from the page
cache.
- with ``--tls``: hanet again over mutual TLS (certificates of a throw-away trustme CA), as a
  ratio of hanet over plain TCP in the same run.

Prints a table and the ratio of each round (hanet and raw run back to back), then as the last
line one JSON object with the figures: the best of rounds of each, their ratio, and the ratio
of each round with its median.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
OUT = HERE / "out" / "replication"
FILE_SIZE = 64 * 1024 * 1024
HEADER = struct.Struct(">qi")
BATCH = 32 * 1024


def build_master(size: int) -> Path:
    from hanet.store import CommitLogStore, Message, StoreConfig

    root = OUT / f"master-{size >> 20}m"
    marker = root / "complete"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    store = CommitLogStore.open(root, StoreConfig(mapped_file_size=FILE_SIZE))
    body = bytes(range(256)) * 4
    batch = [Message(topic=f"T{i % 4}", body=body, queue_id=i % 8) for i in range(256)]
    while store.max_offset < size:
        store.put_batch(batch)
    store.close()
    marker.touch()
    return root


# -- processes -------------------------------------------------------------------------------


def make_certificates() -> Path:
    """A throw-away CA and a certificate each for the master and the slave."""
    import trustme

    root = OUT / "tls"
    root.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    for name, hosts in (("master", ("127.0.0.1",)), ("slave", ("slave.example",))):
        leaf = ca.issue_cert(*hosts, common_name=name)
        leaf.private_key_and_cert_chain_pem.write_to_path(str(root / f"{name}.crt"))
        leaf.private_key_pem.write_to_path(str(root / f"{name}.key"))
    return root


def tls_settings(tls_dir: str, name: str) -> dict[str, Any]:
    if not tls_dir:
        return {}
    root = Path(tls_dir)
    return {
        "tls_cert": root / f"{name}.crt",
        "tls_key": root / f"{name}.key",
        "tls_ca": root / "ca.pem",
    }


async def run_master(root: str, tls_dir: str = "", sendfile: bool = False) -> None:
    from hanet.ha import BrokerConfig, HAMaster
    from hanet.store import CommitLogStore, StoreConfig

    store = CommitLogStore.open(Path(root), StoreConfig(mapped_file_size=FILE_SIZE))
    config = BrokerConfig(
        ha_listen_port=0, full_sync=True, ha_sendfile=sendfile, **tls_settings(tls_dir, "master")
    )
    master = HAMaster(store, config)
    async with trio.open_nursery() as nursery:
        _, port = await nursery.start(master.serve)
        cpu = time.process_time()  # from here on: serving the slave (and idling)
        print(port, store.max_offset, flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)  # until the parent closes stdin
        nursery.cancel_scope.cancel()
    print(json.dumps({"cpu": time.process_time() - cpu}), flush=True)
    store.close()


async def run_slave(root: str, port: int, end: int, tls_dir: str = "") -> None:
    from hanet.ha import BrokerConfig, HASlave
    from hanet.store import CommitLogStore, StoreConfig, StoreRole

    shutil.rmtree(root, ignore_errors=True)
    store = CommitLogStore.open(
        Path(root), StoreConfig(mapped_file_size=FILE_SIZE, role=StoreRole.SLAVE)
    )
    done = trio.Event()
    start = cpu = 0.0

    def progress(offset: int) -> None:
        nonlocal start, cpu
        if not start:
            start = time.perf_counter()
            cpu = time.process_time()
        if offset >= end:
            done.set()

    store.add_listener(progress)
    config = BrokerConfig(ha_master_address=f"127.0.0.1:{port}", **tls_settings(tls_dir, "slave"))
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)  # as a broker runs it: flushes, makes the next file
        await nursery.start(HASlave(store, config).run)
        await done.wait()
        store.dispatch()  # what the dispatcher has not reached yet: consume queues complete
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        nursery.cancel_scope.cancel()
    ok = store.dispatch_error is None and store.dispatched_offset >= end
    store.close()
    print(json.dumps({"seconds": elapsed, "bytes": end, "valid": ok, "cpu": cpu}), flush=True)


async def raw_sender(root: str, port: int) -> None:
    listener = (await trio.open_tcp_listeners(port, host="127.0.0.1"))[0]
    print(listener.socket.getsockname()[1], flush=True)
    files = sorted(Path(root, "commitlog").iterdir())  # noqa: ASYNC240 - before timing
    stream = await listener.accept()
    offset = 0
    for path in files:
        data = path.read_bytes()
        view = memoryview(data)
        for pos in range(0, len(data), BATCH):
            body = view[pos : pos + BATCH]
            await stream.send_all(HEADER.pack(offset, len(body)))
            await stream.send_all(body)
            offset += len(body)
    await stream.aclose()


async def raw_receiver(port: int) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    total = 0
    start = time.perf_counter()
    while chunk := await stream.receive_some(256 * 1024):
        total += len(chunk)
    print(json.dumps({"seconds": time.perf_counter() - start, "bytes": total}), flush=True)


# -- the driver ------------------------------------------------------------------------------


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def warm(master_root: Path) -> None:
    """Read the master's files once before a round, so that every round sends them from the
    page cache (the machine's cache may have dropped them, or the last round's slave store may
    have pushed them out): otherwise a round measures the disk, not the path."""
    for path in sorted((master_root / "commitlog").iterdir()):
        with path.open("rb") as f:
            while f.read(1 << 24):
                pass


def hanet_round(
    master_root: Path, tls_dir: Path | None = None, sendfile: bool = False
) -> tuple[float, float, float]:
    """Bytes a second; the master's and the slave's CPU seconds per GB sent."""
    tls = str(tls_dir) if tls_dir is not None else ""
    master = spawn("--role", "master", str(master_root), tls, "1" if sendfile else "0")
    assert master.stdout is not None and master.stdin is not None
    port, end = master.stdout.readline().split()
    slave = spawn("--role", "slave", str(OUT / "slave"), port, end, tls)
    out, _ = slave.communicate(timeout=1800)
    master.stdin.close()
    master_cpu = json.loads(master.stdout.read().strip().splitlines()[-1])["cpu"]
    master.wait(timeout=60)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["valid"], "the slave found invalid records"
    gb = float(result["bytes"]) / 1e9
    return float(result["bytes"]) / float(result["seconds"]), master_cpu / gb, result["cpu"] / gb


def raw_round(master_root: Path) -> float:
    sender = spawn("--role", "raw-sender", str(master_root), "0")
    assert sender.stdout is not None
    port = sender.stdout.readline().strip()
    receiver = spawn("--role", "raw-receiver", port)
    out, _ = receiver.communicate(timeout=1800)
    sender.wait(timeout=60)
    result = json.loads(out.strip().splitlines()[-1])
    return float(result["bytes"]) / float(result["seconds"])


def iperf_round(size: int) -> float | None:
    if shutil.which("iperf3") is None:
        return None
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", "5299"], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        out = subprocess.run(
            ["iperf3", "-c", "127.0.0.1", "-p", "5299", "-n", str(size), "-J"],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stdout
    finally:
        server.wait(timeout=30)
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tls", action="store_true", help="also measure over mutual TLS")
    parser.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        role, *rest = args.role
        if role == "master":
            trio.run(run_master, rest[0], rest[1] if len(rest) > 1 else "", rest[2:3] != ["0"])
        elif role == "slave":
            trio.run(
                run_slave, rest[0], int(rest[1]), int(rest[2]), rest[3] if len(rest) > 3 else ""
            )
        elif role == "raw-sender":
            trio.run(raw_sender, rest[0], int(rest[1]))
        elif role == "raw-receiver":
            trio.run(raw_receiver, int(rest[0]))
        return
    size = args.size_mib << 20
    print(f"generating or reusing a {args.size_mib} MiB master store ...", flush=True)
    master_root = build_master(size)
    tls_dir = make_certificates() if args.tls else None
    rates: dict[str, list[float]] = {
        "hanet": [],
        "sendfile": [],
        "raw": [],
        "iperf3": [],
        "tls": [],
    }
    cpu: dict[str, list[tuple[float, float]]] = {"hanet": [], "sendfile": [], "tls": []}
    for i in range(args.rounds):
        order = ["hanet", "sendfile", "raw", *(["tls"] if args.tls else [])]
        if i % 2:
            order.reverse()
        for name in order:
            warm(master_root)
            if name == "raw":
                rate = raw_round(master_root)
                extra = ""
            else:
                rate, master_cpu, slave_cpu = hanet_round(
                    master_root, tls_dir if name == "tls" else None, sendfile=name == "sendfile"
                )
                cpu[name].append((master_cpu, slave_cpu))
                extra = f"  CPU s/GB: master {master_cpu:.2f}, slave {slave_cpu:.2f}"
            rates[name].append(rate)
            print(f"round {i + 1} {name:7s} {rate / 1e6:8.1f} MB/s{extra}", flush=True)
        ip = iperf_round(size)
        if ip is not None:
            rates["iperf3"].append(ip)
            print(f"round {i + 1} iperf3 {ip / 1e6:8.1f} MB/s", flush=True)
    best = {k: max(v) for k, v in rates.items() if v}
    print()
    print(f"{'path':30s} {'MB/s':>10s} {'vs raw':>8s}")
    for name, label in [
        ("hanet", "hanet master -> slave (stores)"),
        ("sendfile", "the same, master's sendfile"),
        ("raw", "raw trio, send_all per frame"),
        ("iperf3", "iperf3 (loopback ceiling)"),
        ("tls", "hanet over mutual TLS"),
    ]:
        if name in best:
            print(f"{label:30s} {best[name] / 1e6:10.1f} {best[name] / best['raw']:8.2f}")
    # Each round measures hanet and raw back to back: the ratio within a round, and their
    # median, show the spread that one best-of-rounds ratio hides.
    round_ratios = [h / r for h, r in zip(rates["hanet"], rates["raw"], strict=True)]
    median_ratio = statistics.median(round_ratios)
    print(
        "per round, hanet / raw: "
        + ", ".join(f"{ratio:.2f}" for ratio in round_ratios)
        + f" (median {median_ratio:.2f})"
    )
    figures = {
        "size_mib": args.size_mib,
        "hanet_mb_s": round(best["hanet"] / 1e6, 1),
        "raw_per_frame_mb_s": round(best["raw"] / 1e6, 1),
        "ratio_vs_raw_per_frame": round(best["hanet"] / best["raw"], 3),
        "round_ratios": [round(ratio, 3) for ratio in round_ratios],
        "median_round_ratio": round(median_ratio, 3),
        "hanet_rounds_mb_s": [round(rate / 1e6, 1) for rate in rates["hanet"]],
        "raw_rounds_mb_s": [round(rate / 1e6, 1) for rate in rates["raw"]],
    }
    for name, label in [("hanet", "mapping"), ("sendfile", "sendfile"), ("tls", "tls")]:
        if cpu[name]:
            master_side = statistics.median(m for m, _ in cpu[name])
            slave_side = statistics.median(s for _, s in cpu[name])
            print(
                f"CPU seconds per GB ({label}, median of rounds): master {master_side:.2f}, "
                f"slave {slave_side:.2f}"
            )
            figures[f"{label}_master_cpu_s_per_gb"] = round(master_side, 3)
            figures[f"{label}_slave_cpu_s_per_gb"] = round(slave_side, 3)
    if best.get("sendfile"):
        figures["sendfile_mb_s"] = round(best["sendfile"] / 1e6, 1)
        figures["sendfile_vs_mapping"] = round(best["sendfile"] / best["hanet"], 3)
    if "iperf3" in best:
        figures["iperf3_mb_s"] = round(best["iperf3"] / 1e6, 1)
        figures["ratio_vs_iperf3"] = round(best["hanet"] / best["iperf3"], 3)
    if "tls" in best:
        figures["tls_mb_s"] = round(best["tls"] / 1e6, 1)
        figures["tls_ratio_vs_plain"] = round(best["tls"] / best["hanet"], 3)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
