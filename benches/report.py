"""Turns a pytest-benchmark JSON file into the figures the issues name, and checks them.

Usage: ``python benches/report.py RESULTS.json [--quick]``. Rates use the median time of a call.
Targets are checked in full runs; a quick (CI) run is judged against half of each target, so a
shared machine's noise does not turn CI red while a real regression still does.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any


@dataclass
class Row:
    figure: str
    value: str
    target: str
    ok: bool | None
    #: A target its issue does not meet yet: shown as missed, not failed (the issue stays open
    #: with a note until it is met).
    open_issue: int | None = None


#: Targets not met yet, by figure prefix -> issue number.
OPEN_TARGETS = {
    "Spark count + group-by": 5,
    # Issue 3's 2x holds only in part of the runs on the shared VM (README "Status"): in
    # issue 18's session the quick medians were 0.71x (fresh-clone CI, dispatch 5.4 M msg/s)
    # and 1.09-1.35x (dispatch 4.4-9.9 M msg/s from run to run, rounds 0.61-2.01x), the 1x
    # quick threshold inside that spread; the speed work on the write and read paths is
    # issue 20's.
    "dispatch vs batch append": 20,
    "transactions: check-back scan": 18,
    # On the shared 2-core VM the 65,536-row walk (two threads a call) is as often slower as
    # faster than the 8,192-row one (one thread): benches/README.md, issue 20.
    "read_batch, 1 KiB bodies": 20,
}


def load(path: str) -> dict[str, dict[str, Any]]:
    with open(path) as f:
        data = json.load(f)
    out: dict[str, dict[str, Any]] = {}
    for b in data["benchmarks"]:
        info = b.get("extra_info", {})
        metric = info.get("metric")
        if metric:
            out[metric] = {"median": b["stats"]["median"], "min": b["stats"]["min"], **info}
    return out


def rate(m: dict[str, Any], what: str) -> float:
    return float(m[what]) / float(m["median"])


def fmt_rate(v: float, unit: str) -> str:
    if unit == "B/s":
        return f"{v / 1e9:.2f} GB/s"
    return f"{v / 1e6:.2f} M msg/s" if v >= 1e6 else f"{v / 1e3:.0f} k msg/s"


def build(results: dict[str, dict[str, Any]], quick: bool) -> list[Row]:
    rows: list[Row] = []
    scale = 0.5 if quick else 1.0

    def check(value: float, target: float) -> bool:
        return value >= target * scale

    def reported_rate(metric: str, figure: str) -> None:
        """A message rate shown without a target."""
        res = results.get(metric)
        if res:
            rows.append(Row(figure, fmt_rate(rate(res, "messages"), "msg/s"), "(reported)", None))

    for size in (128, 1024):
        base = results.get(f"memcpy_{size}")
        app = results.get(f"batch_append_{size}")
        if base and app:
            ratio = rate(app, "bytes") / rate(base, "bytes")
            target = 0.3 if size == 1024 else None
            rows.append(
                Row(
                    f"batch append {size} B bodies vs memcpy ({fmt_rate(rate(app, 'bytes'), 'B/s')}"
                    f" vs {fmt_rate(rate(base, 'bytes'), 'B/s')}; "
                    f"{fmt_rate(rate(app, 'messages'), 'msg/s')})",
                    f"{ratio:.2f}x",
                    ">= 0.30x" if target else "(reported)",
                    check(ratio, target) if target else None,
                )
            )
    direct, pooled = results.get("batch_append_direct"), results.get("batch_append_pool")
    if direct and pooled:
        rows.append(
            Row(
                "batch append 1 KiB, transient store pool vs direct, unwarmed segments, "
                f"committed ({fmt_rate(rate(pooled, 'bytes'), 'B/s')} vs "
                f"{fmt_rate(rate(direct, 'bytes'), 'B/s')})",
                f"{rate(pooled, 'bytes') / rate(direct, 'bytes'):.2f}x",
                "(reported)",
                None,
            )
        )
    for size in (128, 1024):
        single = results.get(f"put_message_{size}")
        if single:
            r = rate(single, "messages")
            target = 300_000 if size == 128 else None
            rows.append(
                Row(
                    f"single put_message, {size} B bodies, one thread",
                    fmt_rate(r, "msg/s"),
                    ">= 300 k msg/s" if target else "(reported)",
                    check(r, target) if target else None,
                )
            )
    reported_rate("build_put_message_128", "Message(...) + put_message, 128 B")
    app = results.get("batch_append_1024")
    for kind in ("cold", "warm"):
        roll = results.get(f"segment_roll_{kind}")
        if not roll:
            continue
        per_roll = float(roll["median"]) / float(roll["rolls"])
        seg_mib = int(roll["segment_bytes"]) // (1024 * 1024)
        text = (
            f"{per_roll * 1e3:.0f} ms per {seg_mib} MiB segment filled "
            f"({fmt_rate(rate(roll, 'bytes'), 'B/s')}); allocation "
            f"{float(roll['alloc_seconds_per_segment']) * 1e3:.1f} ms/segment in the background; "
            f"slowest batch {float(roll['batch_max_s']) * 1e3:.1f} ms"
        )
        if app:
            text += f"; {rate(roll, 'bytes') / rate(app, 'bytes'):.2f}x the no-roll append rate"
        rows.append(
            Row(f"segment roll, {kind} (1 KiB bodies, 1 MiB batches)", text, "(reported)", None)
        )
    dva = results.get("dispatch_vs_append")
    if dva:
        ratio = float(dva.get("ratio") or float(dva["dispatch_rate"]) / float(dva["append_rate"]))
        rows.append(
            Row(
                f"dispatch vs batch append, 1 KiB bodies, 2 keys "
                f"({fmt_rate(float(dva['dispatch_rate']), 'msg/s')} vs "
                f"{fmt_rate(float(dva['append_rate']), 'msg/s')})",
                f"{ratio:.2f}x",
                ">= 2.00x",
                check(ratio, 2.0),
            )
        )
    gm = results.get("get_message_32")
    if gm:
        r = rate(gm, "messages")
        rows.append(
            Row(
                "get_message, batches of 32, one Python thread",
                fmt_rate(r, "msg/s"),
                ">= 1 M msg/s",
                check(r, 1_000_000),
            )
        )
    rb = results.get("read_batch")
    if rb:
        r = rate(rb, "messages")
        rows.append(
            Row(
                "read_batch to pyarrow, 128 B bodies",
                f"{fmt_rate(r, 'msg/s')} ({fmt_rate(rate(rb, 'bytes'), 'B/s')} of bodies)",
                ">= 10 M msg/s",
                check(r, 10_000_000),
            )
        )
    reported_rate(
        "read_batch_own_props",
        "read_batch to pyarrow, 128 B bodies, every message with properties of its own",
    )
    rc = results.get("read_batch_rows_a_call_1k")
    if rc:
        ratio = float(rc["ratio_8k_to_64k"])
        faults = rc.get("faults_per_call", {})
        rows.append(
            Row(
                "read_batch, 1 KiB bodies (binary_view, CRC checked), 8,192 vs 65,536 rows a call "
                f"({fmt_rate(float(rc['rate_8k']), 'msg/s')} vs "
                f"{fmt_rate(float(rc['rate_64k']), 'msg/s')}; bodies copied into binary: "
                f"{fmt_rate(float(rc['rate_64k_binary']), 'msg/s')}; minor faults a call "
                + ", ".join(f"{k} {float(v):.0f}" for k, v in faults.items())
                + ")",
                f"{ratio:.2f}x",
                "within 10 %",
                abs(ratio - 1) <= (0.2 if quick else 0.1),
            )
        )
    for size in (128, 1024):
        cost = results.get(f"crc_check_cost_{size}")
        if not cost:
            continue
        for name in ("read_batch", "get_message"):
            ratio = float(cost[f"{name}_ratio"])
            rows.append(
                Row(
                    f"{name} with body CRC checks vs without, {size} B bodies "
                    f"({fmt_rate(float(cost[f'{name}_rate']), 'msg/s')} checked; median of "
                    f"{len(cost[f'{name}_ratios'])} paired walks)",
                    f"{ratio:.2f}x the time",
                    "(reported)",
                    None,
                )
            )
    qm = results.get("query_message")
    if qm:
        p50 = float(qm["p50_s"])
        rows.append(
            Row(
                f"query_message by key over {int(qm['messages']):,} indexed messages "
                f"(p99 {float(qm['p99_s']) * 1e6:.1f} us)",
                f"p50 {p50 * 1e6:.1f} us",
                "p50 < 20 us",
                # Lower is better: in quick mode allow twice the target.
                p50 <= 20e-6 / scale,
            )
        )
    gc = results.get("group_commit")
    if gc:
        # The median of per-round ratios (each pairs two phases run back to back); older
        # result files only have the two rates.
        ratio = float(gc.get("ratio") or float(gc["multi_rate"]) / float(gc["single_rate"]))
        per_force = float(gc["msgs_per_force"])
        detail = (
            f"median of {len(gc.get('ratios') or [0])} paired rounds; "
            f"32 producers {fmt_rate(float(gc['multi_rate']), 'msg/s')} vs one "
            f"{fmt_rate(float(gc['single_rate']), 'msg/s')}; put p50 "
            f"{float(gc['put_p50_s']) * 1e3:.2f} ms, p99 {float(gc['put_p99_s']) * 1e3:.2f} ms; "
            f"raw fdatasync p50 {float(gc['fsync_p50_s']) * 1e3:.2f} ms, "
            f"p99 {float(gc['fsync_p99_s']) * 1e3:.2f} ms"
        )
        rows.append(
            Row(f"SYNC_FLUSH group commit ({detail})", f"{ratio:.1f}x", ">= 8x", check(ratio, 8))
        )
        rows.append(
            Row(
                "SYNC_FLUSH messages per force, 32 producers",
                f"{per_force:.1f}",
                ">= 16",
                check(per_force, 16),
            )
        )
    rec = results.get("recovery")
    if rec:
        rec_rate = float(rec["recover_rate"])
        rows.append(
            Row(
                f"abnormal recovery, full CRC scan of {float(rec['bytes']) / 2**20:.0f} MiB "
                f"(plain read of the same files {fmt_rate(float(rec['read_rate']), 'B/s')})",
                fmt_rate(rec_rate, "B/s"),
                ">= 1 GB/s",
                check(rec_rate, 1e9),
            )
        )
    te = results.get("timer_enqueue")
    if te:
        rows.append(
            Row(
                f"timer enqueue of {int(te['messages']):,} messages with random delays into the "
                f"wheel and timer log ({fmt_rate(float(te['enqueue_rate']), 'msg/s')}; plain "
                f"put_message {fmt_rate(float(te['put_rate']), 'msg/s')}, put of the timer "
                f"messages {fmt_rate(float(te['timer_put_rate']), 'msg/s')})",
                f"{float(te['ratio']):.2f}x put_message",
                "(reported)",
                None,
            )
        )
    td = results.get("timer_delivery")
    if td:
        delivery = float(td["delivery_rate"])
        rows.append(
            Row(
                f"timer delivery of a backlog of {int(td['messages']):,} due messages into their "
                "real queues",
                fmt_rate(delivery, "msg/s"),
                ">= 500 k msg/s",
                check(delivery, 500e3),
            )
        )
    spark = results.get("spark_vs_parquet")
    if spark:
        ratio = float(spark["rmqstore_s"]) / float(spark["parquet_s"])
        narrow = float(spark["rmqstore_narrow_s"]) / float(spark["parquet_s"])
        rows.append(
            Row(
                f"Spark count + group-by over {int(spark['messages']):,} messages of 128 B via "
                f"rmqstore vs Parquet ({float(spark['rmqstore_s']):.1f} s vs "
                f"{float(spark['parquet_s']):.1f} s; with a user schema of the two columns used: "
                f"{float(spark['rmqstore_narrow_s']):.1f} s, {narrow:.2f}x"
                + (
                    f"; a Python data source yielding ready-made Arrow batches of the same rows, "
                    f"no store: {float(spark['python_source_floor_s']):.1f} s, "
                    f"{float(spark['python_source_floor_s']) / float(spark['parquet_s']):.2f}x)"
                    if "python_source_floor_s" in spark
                    else ")"
                ),
                f"{ratio:.2f}x the time",
                "<= 2x",
                ratio <= 2.0 / scale,
            )
        )
    jvm = results.get("spark_jvm_vs_parquet")
    if jvm:
        # Issue 21: the JVM connector, beside Parquet and the Python source in one run.
        ratio = float(jvm["jvm_s"]) / float(jvm["parquet_s"])
        rows.append(
            Row(
                f"Spark count + group-by over {int(jvm['messages']):,} messages of 128 B via "
                f"the JVM connector (rmqstore-jvm) vs Parquet ({float(jvm['jvm_s']):.2f} s vs "
                f"{float(jvm['parquet_s']):.2f} s; the Python source: "
                f"{float(jvm['python_s']):.2f} s, "
                f"{float(jvm['python_s']) / float(jvm['parquet_s']):.2f}x)",
                f"{ratio:.2f}x the time",
                "<= 1.2x",
                ratio <= 1.2 / scale,
            )
        )
    tag = results.get("spark_jvm_tag_filter")
    if tag:
        # Issue 21: a tag condition pushed into the core's read against the same count unpushed.
        speed = float(tag["not_pushed_s"]) / float(tag["pushed_s"])
        rows.append(
            Row(
                f"Spark count of 1 % of {int(tag['messages']):,} messages by tag through the JVM "
                f"connector, condition pushed vs not ({float(tag['pushed_s']):.2f} s vs "
                f"{float(tag['not_pushed_s']):.2f} s; a count of every row: "
                f"{float(tag['count_all_s']):.2f} s)",
                f"{speed:.2f}x as fast",
                "(reported)",
                None,
            )
        )
    app = results.get("spark_jvm_append")
    if app:
        # Issue 21: appends through the JVM connector against the Python source, same run.
        speed = float(app["python_s"]) / float(app["jvm_s"])
        rows.append(
            Row(
                f"Spark append of {int(app['messages']):,} messages of 128 B through the JVM "
                f"connector vs the Python source ({float(app['jvm_s']):.2f} s vs "
                f"{float(app['python_s']):.2f} s)",
                f"{speed:.2f}x as fast",
                "(reported)",
                None,
            )
        )
    sd = results.get("schedule_delivery")
    if sd:
        deliver = float(sd["deliver_rate"])
        rows.append(
            Row(
                f"delay levels: delivery of {int(sd['messages']):,} due messages of 128 B into "
                f"their real queues, dispatched ({fmt_rate(deliver, 'msg/s')}; put_message of the "
                f"same messages {fmt_rate(float(sd['put_rate']), 'msg/s')}, "
                f"{float(sd['ratio']):.2f}x)",
                fmt_rate(deliver, "msg/s"),
                ">= 500 k msg/s",
                check(deliver, 500_000),
            )
        )
    sl = results.get("schedule_lateness")
    if sl:
        p99 = float(sl["p99_ms"])
        rows.append(
            Row(
                f"delay levels: lateness of {int(sl['messages'])} level-1 messages under light "
                f"load, first seen readable in the real queue - deliver time (p50 "
                f"{float(sl['p50_ms']):.1f} ms, max {float(sl['max_ms']):.1f} ms; store time - "
                f"deliver time p50 {float(sl.get('stored_p50_ms', 0)):.0f} ms, p99 "
                f"{float(sl.get('stored_p99_ms', 0)):.0f} ms)",
                f"p99 {p99:.1f} ms",
                "p99 <= 100 ms",
                # Lower is better: in quick mode allow twice the target.
                p99 <= 100 / scale,
            )
        )

    cw = results.get("clean_while_appending")
    if cw:
        ratio = float(cw["ratio"])

        def us(key: str) -> str:
            return f"{float(cw[key]) * 1e6:.1f} us"

        rows.append(
            Row(
                f"put_message p99 while the cleaner deletes {float(cw['bytes_deleted']) / 2**30:g}"
                f" GiB of expired segments ({int(cw['files'])} files, "
                f"{float(cw['clean_s']):.2f} s), vs without, one producer of 1 KiB messages at "
                f"{int(cw['rate']):,} msg/s (p99 {us('cleanup_p99_s')} vs {us('baseline_p99_s')}"
                f": before it {us('before_p99_s')}, after it {us('after_p99_s')}; max "
                f"{float(cw['cleanup_max_s']) * 1e3:.1f} ms vs "
                f"{float(cw['baseline_max_s']) * 1e3:.1f} ms)",
                f"{ratio:.2f}x",
                "<= 2x",
                # Lower is better: in quick mode allow twice the target.
                ratio <= 2.0 / scale,
            )
        )

    def tx_rate(v: float) -> str:
        return fmt_rate(v, "msg/s").replace("msg/s", "tx/s")

    for metric, config in (
        ("tx_prepare_commit", "default settings"),
        ("tx_prepare_commit_warm", "warm_mapped_file_enable"),
    ):
        tpc = results.get(metric)
        if not tpc:
            continue
        tx = float(tpc["tx_rate"])
        rows.append(
            Row(
                f"transactions: prepare + commit of {int(tpc['transactions']):,} messages of "
                f"128 B, one Python thread, ASYNC_FLUSH, {config} "
                f"({float(tpc['ratio']):.2f}x put_message "
                f"of the same messages, {fmt_rate(float(tpc['put_rate']), 'msg/s')}; through "
                f"store._core's methods {tx_rate(float(tpc['core_rate']))}, "
                f"{float(tpc['core_ratio']):.2f}x"
                + (
                    f"; thread CPU {float(tpc['tx_cpu_us']):.2f} µs a transaction, "
                    f"{float(tpc['put_cpu_us']):.2f} µs a put"
                    if "tx_cpu_us" in tpc
                    else ""
                )
                + ")",
                tx_rate(tx),
                ">= 300 k tx/s",
                check(tx, 300_000),
            )
        )
    pf = results.get("prefault")
    if pf:
        for kind, what in (("put", "single put_message"), ("tx", "prepare + commit")):
            show = tx_rate if kind == "tx" else (lambda v: fmt_rate(v, "msg/s"))
            rows.append(
                Row(
                    f"prefault service, {what} of 128 B, one Python thread, ASYNC_FLUSH: "
                    f"{show(float(pf[f'{kind}_rate']))} with the 32 MiB window, "
                    f"{show(float(pf[f'{kind}_rate_off']))} without; the putting "
                    f"thread's CPU {float(pf[f'{kind}_cpu_us']):.2f} us an operation vs "
                    f"{float(pf[f'{kind}_cpu_us_off']):.2f} us",
                    f"{float(pf[f'{kind}_ratio']):.2f}x",
                    "(reported)",
                    None,
                )
            )
    tsf = results.get("tx_sync_flush")
    if tsf:
        per_force = float(tsf["puts_per_force"])
        rows.append(
            Row(
                f"transactions, SYNC_FLUSH, {int(tsf['threads'])} threads: "
                f"{tx_rate(float(tsf['tx_rate']))} "
                f"({float(tsf['ratio']):.2f}x put_message from the same threads, "
                f"{fmt_rate(float(tsf['put_rate']), 'msg/s')}); "
                f"{float(tsf['forces_per_tx']):.3f} forces a transaction "
                f"(put_message: {float(tsf['forces_per_put']):.3f} a message); synchronous "
                "puts (half + commit) per force",
                f"{per_force:.1f}",
                ">= 16",
                check(per_force, 16),
            )
        )
    for metric, config in (
        ("tx_check_scan", "default settings"),
        ("tx_check_scan_warm", "warm_mapped_file_enable"),
        ("tx_check_scan_recycled", "default settings, pages just freed"),
    ):
        tcs = results.get(metric)
        if not tcs:
            continue
        scan = float(tcs["scan_rate"])
        pages = ""
        if "fresh_page_us" in tcs:
            pages = (
                f"; a fresh page {float(tcs['fresh_page_us']):.1f} us, "
                f"{float(tcs['page_cpu_us']):.2f} us of pages a half"
            )
        rows.append(
            Row(
                f"transactions: check-back scan of {int(tcs['halves']):,} pending halves, no op "
                f"message, each copied for its check, checker aside, {config} "
                f"({float(tcs['ratio']):.2f}x put_message of the same messages, "
                f"{fmt_rate(float(tcs['put_rate']), 'msg/s')}{pages})",
                fmt_rate(scan, "msg/s").replace("msg/s", "halves/s"),
                ">= 1 M halves/s",
                check(scan, 1_000_000),
            )
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rows = build(load(args.results), args.quick)
    for r in rows:
        for prefix, issue in OPEN_TARGETS.items():
            if r.figure.startswith(prefix):
                r.open_issue = issue
    mode = "quick (targets halved)" if args.quick else "full"
    print(f"\n## rmqstore benchmark figures ({mode})\n")
    print("| figure | measured | target | |")
    print("|---|---|---|---|")
    for r in rows:
        mark = "" if r.ok is None else ("ok" if r.ok else "MISSED")
        if r.ok is False and r.open_issue is not None:
            mark = f"MISSED (open, issue {r.open_issue})"
        print(f"| {r.figure} | {r.value} | {r.target} | {mark} |")
    missed = [r for r in rows if r.ok is False and r.open_issue is None]
    if missed:
        print(f"\n{len(missed)} target(s) missed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
