"""A real RocketMQ broker and name server (``broker/``, ``rmqbroker.BrokerHarness``) for the
broker round trip of ``test_broker.py``: build, ports, running it bounded in time, checking that
it listens on 127.0.0.1 only, and reading its JSON lines.

Profiles (``broker/pom.xml``): ``rmq551`` is RocketMQ 5.5.1's broker and store with the 5.5.0
name server, client and tools (the newest on Maven Central; they work together), ``rmq533`` is
5.3.3 throughout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from interop_harness import SegmentSizes, jvm_command
from maven_build import MavenProject

BROKER_DIR = Path(__file__).resolve().parent / "broker"
PROJECT = MavenProject(
    name="RocketMQ broker harness",
    directory=BROKER_DIR,
    jar="rmq-broker-harness-1.0.jar",
    default_profile="rmq551",
    profiles={"rmq551": BROKER_DIR / "target", "rmq533": BROKER_DIR / "target" / "rmq533"},
    needs="rocketmq-broker",
)
#: What the JVM may take in all (its own watchdog halts it after HARNESS_TIMEOUT).
HARNESS_TIMEOUT = 240


def build_broker_harness(profile: str) -> str:
    """Builds the broker harness for a profile if needed; returns its classpath."""
    return PROJECT.build(profile)


# -- ports and sockets ----------------------------------------------------------------------


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports() -> tuple[int, int, int]:
    """(name server, broker, HA) ports free on 127.0.0.1; the broker also needs port - 2 (its
    "fast" remoting server)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        ports = (base, base + 3, base + 4)
        if base + 4 < 65536 and all(_port_free(p) for p in (base, base + 1, base + 3, base + 4)):
            return ports
    raise RuntimeError("no four free ports in a row on 127.0.0.1")


def listening_addresses(pid: int) -> list[tuple[str, int]]:
    """The local (address, port) of every TCP socket that ``pid`` holds in LISTEN state, from
    /proc (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    out: list[tuple[str, int]] = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A = LISTEN
                continue
            hex_addr, hex_port = local.split(":")
            raw = bytes.fromhex(hex_addr)
            # /proc prints the address as host-order 32-bit words.
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            addr = socket.inet_ntop(family, raw)
            # Java's sockets are IPv6 ones: an IPv4 address shows as ::ffff:a.b.c.d.
            out.append((addr.removeprefix("::ffff:"), int(hex_port, 16)))
    return out


# -- running --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BrokerSizes(SegmentSizes):
    """Segment sizes both the broker and rmqstore use (they must match)."""

    commitlog: int = 1024 * 1024
    cq: int = 20 * 1000
    hash_slots: int = 500
    index_num: int = 2000

    def rmq(self, store_host: str) -> dict[str, Any]:
        return {**self.rmq_sizes(), "store_host": store_host}


@dataclasses.dataclass
class BrokerRun:
    """What one ``serve`` printed, by kind, and the sockets it listened on."""

    lines: list[dict[str, Any]]
    listening: list[tuple[str, int]]
    stderr: str

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [x for x in self.lines if x.get("kind") == kind]


def rocketmq_log_tails(home: Path, since: float, lines: int = 40) -> str:
    """The last ``lines`` of each RocketMQ log (client, remoting, broker, ...) written under
    ``home`` since ``since``: a failed run's own account of what its clients and broker did
    (a closed connection, a timed-out request), kept in the failure message because the
    folder holding them is gone once later runs rotate the test folders."""
    out = []
    for log in sorted((home / "logs").rglob("*.log")) if (home / "logs").is_dir() else []:
        if log.stat().st_mtime < since:
            continue
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"--- {log.relative_to(home)} (last {len(tail)} lines)\n" + "\n".join(tail))
    return "\n".join(out) or f"(no RocketMQ log under {home}/logs written by this run)"


@dataclasses.dataclass
class BrokerHarness:
    java: str
    classpath: str
    home: Path
    version: str

    def command(self, ports: tuple[int, int, int], sizes: BrokerSizes, *args: str) -> list[str]:
        namesrv, broker, ha = ports
        return jvm_command(
            self.java, self.home, self.classpath, "rmqbroker.BrokerHarness",
            "--namesrv-port", str(namesrv),
            "--broker-port", str(broker),
            "--ha-port", str(ha),
            "--timeout-s", str(HARNESS_TIMEOUT),
            *sizes.java_args(),
            *args,
            jvm=("-Xmx512m",),
        )  # fmt: skip

    def serve(
        self,
        store: Path,
        ports: tuple[int, int, int],
        sizes: BrokerSizes,
        topics: list[str],
        produce: list[dict[str, Any]] | None = None,
    ) -> BrokerRun:
        """Runs a broker on ``store``: reads ``topics`` with real clients, then sends
        ``produce`` through it, then shuts down. Returns its lines; fails on a non-zero exit.
        The sockets are read from /proc as soon as it reports it started."""
        args = ["serve", str(store), ",".join(topics)]
        if produce is not None:
            args.append(str(self._jsonl(store, produce)))
        run = self.run(ports, sizes, *args)
        assert run.lines[-1] == {"kind": "stopped"}, run.lines[-3:]
        return run

    @staticmethod
    def _jsonl(store: Path, messages: list[dict[str, Any]]) -> Path:
        jsonl = store.parent / f"produce-{time.monotonic_ns()}.jsonl"
        jsonl.write_text("".join(json.dumps(d) + "\n" for d in messages))
        return jsonl

    def send(
        self,
        store: Path,
        ports: tuple[int, int, int],
        sizes: BrokerSizes,
        messages: list[dict[str, Any]],
        *options: str,
    ) -> BrokerRun:
        """``send``: a producer sends ``messages`` (delayLevel, delayMs, delaySec, deliverTimeMs
        through the client's setters) to a broker on ``store``, which then shuts down."""
        return self.run(
            ports, sizes, *options, "send", str(store), str(self._jsonl(store, messages))
        )

    def await_delivery(
        self,
        store: Path,
        ports: tuple[int, int, int],
        sizes: BrokerSizes,
        expect: int,
        *options: str,
    ) -> BrokerRun:
        """``await-delivery``: a broker on ``store`` until ``expect`` messages arrived in real
        queues (its ScheduleMessageService and TimerMessageStore delivering)."""
        return self.run(ports, sizes, *options, "await-delivery", str(store), str(expect))

    def tx_run(
        self,
        store: Path,
        ports: tuple[int, int, int],
        sizes: BrokerSizes,
        plan: list[dict[str, Any]],
        *options: str,
    ) -> BrokerRun:
        """``tx-run``: a TransactionMQProducer sends every planned transaction (``local``:
        COMMIT, ROLLBACK, UNKNOW) through a broker on ``store``, then ``--check-rounds`` rounds
        of the broker's own check answer ``checks``; the broker shuts down with every op entry
        written."""
        return self.run(ports, sizes, *options, "tx-run", str(store), str(self._jsonl(store, plan)))

    def tx_await(
        self,
        store: Path,
        ports: tuple[int, int, int],
        sizes: BrokerSizes,
        plan: list[dict[str, Any]],
        topics: list[str],
        *options: str,
    ) -> BrokerRun:
        """``tx-await``: a broker on ``store`` with its check service running and a
        TransactionMQProducer answering its checks from ``plan`` (by ``seq``); waits for
        ``--expect-ends`` ends, then reads ``topics`` with a pull consumer."""
        return self.run(
            ports, sizes, *options, "tx-await", str(store), str(self._jsonl(store, plan)),
            ",".join(topics),
        )  # fmt: skip

    def run(self, ports: tuple[int, int, int], sizes: BrokerSizes, *args: str) -> BrokerRun:
        """One harness command that starts the broker; its lines (fails on a non-zero exit)."""
        started = time.time()
        proc = subprocess.Popen(
            self.command(ports, sizes, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        stderr: list[str] = []
        drain = threading.Thread(target=lambda: stderr.extend(proc.stderr or []), daemon=True)
        drain.start()
        lines: list[dict[str, Any]] = []
        listening: list[tuple[str, int]] = []
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = json.loads(raw)
                lines.append(line)
                if line["kind"] == "started":
                    listening = listening_addresses(proc.pid)
            rc = proc.wait(timeout=HARNESS_TIMEOUT + 30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            drain.join(10)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        err = "".join(stderr)
        if rc != 0:
            logs = rocketmq_log_tails(self.home, started)
            raise AssertionError(f"broker harness exited {rc}\nstderr: {err[-6000:]}\n{logs}")
        assert lines[0]["kind"] == "started", lines[:3]
        assert {"kind": "stopped"} in lines, lines[-3:]
        return BrokerRun(lines=lines, listening=listening, stderr=err)

    def load_offsets(self, dirs: list[Path]) -> list[dict[str, Any]]:
        """RocketMQ's ``ConfigManager.load`` of each folder's consumerOffset.json."""
        proc = subprocess.run(
            self.command((0, 0, 0), BrokerSizes(), "load-offsets", *map(str, dirs)),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [json.loads(x) for x in proc.stdout.splitlines()]
