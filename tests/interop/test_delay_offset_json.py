"""Issue 17: ``config/delayOffset.json`` as Apache RocketMQ's own code reads and writes it.

RocketMQ 4.9.8 keeps ``DelayOffsetSerializeWrapper`` in its store jar (fastjson 1.2.69); 5.5.1
moved it into the broker jar, which the harness does not depend on, so the 5.5.1 side uses a
class with the same two fields (``ConcurrentMap<Integer, Long> offsetTable``, ``DataVersion
dataVersion``) through the same ``RemotingSerializable`` (fastjson2). Both directions: the file
rmqstore writes decodes to the same table in RocketMQ, and the file RocketMQ's
``ConfigManager.persist`` writes (``encode(true)``: bare integer keys, tabs) is loaded by
rmqstore, which goes on delivering from it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from interop_harness import JavaHarness
from rmqstore import Message, MessageStore
from rmqstore._schedule import DelayOffsetManager

pytestmark = pytest.mark.interop

_MAIN = """
    public static void main(String[] a) throws Exception {
        java.nio.file.Path path = java.nio.file.Paths.get(a[1]);
        if (a[0].equals("read")) {
            String json = new String(java.nio.file.Files.readAllBytes(path), "UTF-8");
            WRAPPER w = WRAPPER.fromJson(json, WRAPPER.class);
            for (java.util.Map.Entry<Integer, Long> e
                    : new java.util.TreeMap<>(w.getOffsetTable()).entrySet()) {
                System.out.println(e.getKey() + "=" + e.getValue());
            }
            System.out.println("version=" + version(w));
        } else {
            WRAPPER w = new WRAPPER();
            for (int i = 3; i < a.length; i++) {
                String[] kv = a[i].split("=");
                w.getOffsetTable().put(Integer.parseInt(kv[0]), Long.parseLong(kv[1]));
            }
            setVersion(w, Long.parseLong(a[2]));
            // ConfigManager.persist writes encode(true), the pretty form.
            java.nio.file.Files.write(path, w.toJson(true).getBytes("UTF-8"));
        }
    }
}
"""

# 4.9.8: the store jar's own class; it has no dataVersion.
JAVA_498 = """
import org.apache.rocketmq.store.schedule.DelayOffsetSerializeWrapper;

public class DelayOffsetCheck {
    static String version(DelayOffsetSerializeWrapper w) { return "none"; }
    static void setVersion(DelayOffsetSerializeWrapper w, long ts) {}
""" + _MAIN.replace("WRAPPER", "DelayOffsetSerializeWrapper")

# 5.5.1: the broker's class, field for field, on the same serializer.
JAVA_551 = """
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.remoting.protocol.DataVersion;
import org.apache.rocketmq.remoting.protocol.RemotingSerializable;

public class DelayOffsetCheck {
    public static class Wrapper extends RemotingSerializable {
        private ConcurrentMap<Integer, Long> offsetTable = new ConcurrentHashMap<>(32);
        private DataVersion dataVersion;
        public ConcurrentMap<Integer, Long> getOffsetTable() { return offsetTable; }
        public void setOffsetTable(ConcurrentMap<Integer, Long> t) { this.offsetTable = t; }
        public DataVersion getDataVersion() { return dataVersion; }
        public void setDataVersion(DataVersion v) { this.dataVersion = v; }
    }
    static String version(Wrapper w) {
        DataVersion v = w.getDataVersion();
        return v == null ? "none" : v.getTimestamp() + "/" + v.getCounter().get();
    }
    static void setVersion(Wrapper w, long ts) {
        DataVersion v = new DataVersion();
        v.setTimestamp(ts);
        w.setDataVersion(v);
    }
""" + _MAIN.replace("WRAPPER", "Wrapper")


@pytest.fixture(params=["rmq5", "rmq4"])
def checker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Runs DelayOffsetCheck with the referee's classpath: ``check(*args) -> stdout``."""
    harness: JavaHarness = request.getfixturevalue(
        "rocketmq" if request.param == "rmq5" else "rocketmq4"
    )
    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("javac not found on PATH; the delayOffset.json check compiles a small class")
    folder = tmp_path_factory.mktemp(f"delay-offset-{request.param}")
    (folder / "DelayOffsetCheck.java").write_text(JAVA_551 if request.param == "rmq5" else JAVA_498)
    subprocess.run(
        [javac, "-cp", harness.classpath, "-d", str(folder), str(folder / "DelayOffsetCheck.java")],
        check=True,
        capture_output=True,
        timeout=120,
    )

    def check(*args: str) -> str:
        proc = subprocess.run(
            [harness.java, "-cp", f"{folder}:{harness.classpath}", "DelayOffsetCheck", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    check.version = request.param  # type: ignore[attr-defined]
    return check


STORE = {"message_delay_level": "1s 1h", "mapped_file_size_commit_log": 1024 * 1024}


def test_rocketmq_reads_what_rmqstore_writes(checker, tmp_path: Path) -> None:
    path = tmp_path / "store"
    with MessageStore(path, **STORE) as store:
        for i in range(3):
            store.put_message(Message("Real", bytes([i]), delay_level=1))
        store.put_message(Message("Real", b"later", delay_level=2))
        store.wait_dispatched()
        deadline = time.monotonic() + 5
        while store.schedule_offsets()[1] < 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    doc = json.loads((path / "config" / "delayOffset.json").read_text())
    lines = checker("read", str(path / "config" / "delayOffset.json")).split()
    assert lines[:2] == ["1=3", "2=0"]
    version = doc["dataVersion"]
    expected = (
        "none" if checker.version == "rmq4" else f"{version['timestamp']}/{version['counter']}"
    )
    assert lines[2] == f"version={expected}"


def test_rmqstore_continues_from_what_rocketmq_writes(checker, tmp_path: Path) -> None:
    path = tmp_path / "store"
    with MessageStore(path, **STORE) as store:
        for i in range(4):
            store.put_message(Message("Real", bytes([i]), delay_level=2))
    config = path / "config"
    checker("write", str(config / "delayOffset.json"), "1700000000123", "2=3", "18=7")
    raw = (config / "delayOffset.json").read_text()
    assert "\t" in raw  # RocketMQ's pretty format, not ours
    with DelayOffsetManager(config) as manager:
        assert manager.offset_table() == {2: 3, 18: 7}
        if checker.version == "rmq5":
            assert manager.persisted_at_ms == 1700000000123
    with MessageStore(path, **STORE) as store:
        # Level 2's queue holds 4 messages; RocketMQ's progress says 3 were delivered.
        stats = store.schedule_stats()[1]
        assert (stats.offset, stats.max_offset, stats.pending) == (3, 4, 1)
    # Written back with the entry of the level this store's table does not have.
    assert json.loads((config / "delayOffset.json").read_text())["offsetTable"]["18"] == 7
