"""Where a Python ``read_batch`` call's time goes, per call: the core's read (the binding's
``read_batch_buffers``) and the assembly of the pyarrow RecordBatch (``_arrow.batch_from_buffers``,
the previous batch's release included), in CPU time of the calling thread, medians over many
calls of the same range (issue 20: fixed costs a call, which weigh on 8,192-row reads more than on
65,536-row ones).

    .venv/bin/python benches/read_calls.py [--size 1024] [--rows 8192] [--calls 300]
        [--other-arrow PATH]

``--other-arrow`` loads another version of ``rmqstore/_arrow.py`` (e.g. one written out by
``git show <commit>:python/rmqstore/_arrow.py``) and alternates its assembly with the installed
one's, call by call, on the same buffers' reads: a same-run ratio of two versions.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import rmqstore
from rmqstore import _arrow

TOPIC = "CallTopic"


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("rmqstore._arrow_other", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--rows", type=int, default=8192, help="rows a call")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--other-arrow", help="another _arrow.py to alternate with")
    args = ap.parse_args()
    versions = {"installed": _arrow}
    if args.other_arrow:
        versions["other"] = _load(args.other_arrow)
    root = Path(tempfile.mkdtemp(prefix="rmq-read-calls-"))
    try:
        with rmqstore.MessageStore(root / "store") as store:
            body = bytes(args.size)
            for _ in range(0, args.rows, 1000):
                store.put_messages(TOPIC, 0, [body] * 1000)
            while store.get_max_offset_in_queue(TOPIC, 0) < args.rows:
                time.sleep(0.01)
            core = store._core
            for label, columns in (
                ("every column", None),
                ("queue_offset, body", ("queue_offset", "body")),
            ):
                names = _arrow.resolve_columns(columns, True)
                read_ns: list[int] = []
                build_ns: dict[str, list[int]] = {k: [] for k in versions}
                keep: Any = None
                for i in range(args.calls):
                    for key, module in versions.items():
                        t0 = time.thread_time_ns()
                        r = core.read_batch_buffers(
                            TOPIC,
                            0,
                            0,
                            args.rows,
                            True,
                            None,
                            True,
                            None if columns is None else names,
                        )
                        t1 = time.thread_time_ns()
                        keep = module.batch_from_buffers(
                            r.rows, r.columns, True, "binary_view", names
                        )
                        t2 = time.thread_time_ns()
                        if i >= 10:
                            read_ns.append(t1 - t0)
                            build_ns[key].append(t2 - t1)
                assert keep.num_rows == args.rows
                keep = None
                medians = {k: statistics.median(v) for k, v in build_ns.items()}
                built = ", ".join(f"{k} {m / 1e3:.1f} us" for k, m in medians.items())
                ratio = ""
                if "other" in medians:
                    ratio = f" (other / installed {medians['other'] / medians['installed']:.2f}x)"
                print(
                    f"{label}, {args.size} B, {args.rows} rows a call: core read "
                    f"{statistics.median(read_ns) / 1e3:.1f} us, batch assembly {built}{ratio}"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
