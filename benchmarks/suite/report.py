"""Targets and the Markdown summary, computed from the suite's JSON results."""

from __future__ import annotations

from typing import Any

__all__ = ["derive", "markdown"]


def _k(x: float | int | None) -> str:
    if x is None:
        return "-"
    return f"{x / 1000:,.0f}k" if x >= 10_000 else f"{x:,.0f}"


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def derive(results: dict[str, Any]) -> None:
    """Add per-core rates, ratios and the target verdicts to ``results`` (in place)."""
    cores = results["machine"]["cpus"]
    for row in results["druid"] + results["peers"]:
        ours = row["indexing"]["per_s"]
        row["indexing_per_core"] = round(ours / cores)
        row["per_core_over_druid"] = _ratio(ours / cores, row.get("druid_per_task"))
        row["over_raw"] = _ratio(ours, row["raw_consume_per_s"])
        row["over_raw_default_gc"] = _ratio(ours, row.get("raw_consume_default_gc_per_s"))
        row["over_plain_loop_default_gc"] = _ratio(ours, row.get("plain_loop_default_gc", {}).get("per_s"))
        row["over_raw_2proc"] = _ratio(ours, row["raw_consume_2proc_per_s"])
        row["over_consume_parse"] = _ratio(ours, row["consume_parse_per_s"])
        row["over_plain_loop"] = _ratio(ours, row.get("plain_loop", {}).get("per_s"))
        for mode in ("quix_at_least_once", "quix_exactly_once"):
            if mode in row:
                row[f"over_{mode}"] = _ratio(ours, row[mode]["per_s"])
    results["targets"] = _targets(results)


def _target(name: str, measured: float | None, threshold: float, where: str, at_most: bool = False
            ) -> dict[str, Any]:
    met = measured is not None and (measured <= threshold if at_most else measured >= threshold)
    return {"target": name, "where": where, "measured": measured, "threshold": threshold,
            "comparison": "<=" if at_most else ">=", "met": met}


def _targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    druid = {r["shape"]: r for r in results["druid"]}
    peers = {r["shape"]: r for r in results["peers"]}
    if "1 low" in druid:
        out.append(_target("indexing / raw consume (1 consumer, GC paused)", druid["1 low"]["over_raw"], 0.7, "1 low"))
        out.append(_target("indexing / raw consume (1 consumer, default GC)", druid["1 low"]["over_raw_default_gc"],
                           0.7, "1 low"))
    for row in results["druid"]:
        out.append(_target("events/s per core / Druid's per task", row["per_core_over_druid"], 1.0, row["shape"]))
    for shape in ("1 low", "10 low + 1 high"):
        if shape in peers:
            out.append(_target("ours / Quix Streams exactly-once", peers[shape].get("over_quix_exactly_once"),
                               5.0, f"{shape} (peer topic)"))
        for where, rows in (("peer topic", peers), ("Druid topic", druid)):
            if shape in rows:
                out.append(_target("ours / plain loop (GC paused)", rows[shape]["over_plain_loop"], 1.5,
                                   f"{shape} ({where})"))
                out.append(_target("ours / plain loop (default GC)", rows[shape]["over_plain_loop_default_gc"], 1.5,
                                   f"{shape} ({where})"))
    growth = results["scaling"].get("growth") or []
    if len(growth) >= 2:
        per_event = [g["seconds"] / g["events"] for g in growth]
        growth_ratio = round(per_event[-1] / min(per_event), 3)
        results["scaling"]["growth_linearity"] = growth_ratio
        out.append(_target(f"seconds per event at {growth[-1]['events']:,} / the series' lowest (1 = linear)",
                           growth_ratio, 1.2, "1 low", at_most=True))
    return out


def _checks(row: dict[str, Any]) -> str:
    checks = row.get("checks", {})
    names = [k for k, v in checks.items() if isinstance(v, dict)]
    if not names:
        return "-"
    return ", ".join(f"{k.replace('_', ' ')}: {'equal' if checks[k]['equal'] else 'DIFFERENT'}" for k in names)


def markdown(results: dict[str, Any]) -> str:
    m, v, p = results["machine"], results["versions"], results["parameters"]
    lines = [
        f"# Benchmark suite, {results['started'][:10]}", "",
        f"Machine: {m['cpus']} cores ({m['cpu_model']}), {m['memory_gb']} GB, {m['platform']}; load average "
        f"{m['load_average_start']} at start, {m.get('load_average_end')} at the end (a shared machine: "
        "compare ratios, which were measured minutes apart in the same run, not absolute rates).",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        f"Parameters: {p['events']:,} events per Druid shape, {p['partitions']} partitions, peer topics of "
        f"{p['peer_events']:,} events; started {results['started']}, finished {results.get('finished')}.", "",
        "## Druid's table (Kafka -> published segments, per core of this machine)", "",
        "| shape | B/event | raw consume | raw, default GC | raw, 2 procs | consume + parse | plain loop "
        "| plain, default GC | ours | ours per core | Druid per task | per core / Druid | ours / raw "
        "| ours / raw (default GC) | ours / plain | ours / plain (default GC) | aggregates |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["druid"]:
        plain = r.get("plain_loop", {}).get("per_s")
        plain_gc = r.get("plain_loop_default_gc", {}).get("per_s")
        lines.append(
            f"| {r['shape']} | {r['bytes_per_event']:.0f} | {_k(r['raw_consume_per_s'])} "
            f"| {_k(r.get('raw_consume_default_gc_per_s'))} | {_k(r['raw_consume_2proc_per_s'])} "
            f"| {_k(r['consume_parse_per_s'])} | {_k(plain)} | {_k(plain_gc)} "
            f"| {_k(r['indexing']['per_s'])} | {_k(r['indexing_per_core'])} | {_k(r['druid_per_task'])} "
            f"| {_r(r['per_core_over_druid'])} | {_r(r['over_raw'])} | {_r(r['over_raw_default_gc'])} "
            f"| {_r(r['over_plain_loop'])} | {_r(r['over_plain_loop_default_gc'])} | {_checks(r)} |")
    fixed = results.get("task_fixed_cost")
    if fixed:
        lines += ["", f"Fixed cost of one task (a {fixed['events']:,}-event topic, warm session): "
                      f"{fixed['seconds_median']:.2f} s (Spark job + per-split setup), included in every rate above."]
    lines += ["", "Rates in events/s, best of the runs. Raw consume: confluent-kafka, values only, one consumer; "
              "2 procs: one consumer in each of two processes. Consume + parse: one consumer, pyarrow.json in bulk. "
              "Plain loop: one process, orjson per record, dict aggregation. Python's cyclic GC is paused in every "
              "loop (as in our worker) unless the column says default GC. Ours: `run_index_task` on a warm local "
              "Spark session, topic -> published segments, verified.", "",
              "## Peers on one topic", "",
              "| shape | events | raw consume | plain loop | plain, default GC | Quix at-least-once "
              "| Quix exactly-once | ours | ours / Quix EOS | ours / Quix ALO | ours / plain "
              "| ours / plain (default GC) | aggregates |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["peers"]:
        lines.append(
            f"| {r['shape']} | {r['events']:,} | {_k(r['raw_consume_per_s'])} | {_k(r['plain_loop']['per_s'])} "
            f"| {_k(r['plain_loop_default_gc']['per_s'])} | {_k(r.get('quix_at_least_once', {}).get('per_s'))} "
            f"| {_k(r.get('quix_exactly_once', {}).get('per_s'))} | {_k(r['indexing']['per_s'])} "
            f"| {_r(r.get('over_quix_exactly_once'))} | {_r(r.get('over_quix_at_least_once'))} "
            f"| {_r(r['over_plain_loop'])} | {_r(r['over_plain_loop_default_gc'])} | {_checks(r)} |")
    lines += _scaling(results) + _profile(results)
    lines += ["", "## Targets", "", "| target | where | measured | needed | met |", "|---|---|---|---|---|"]
    for t in results["targets"]:
        lines.append(f"| {t['target']} | {t['where']} | {_r(t['measured'])} | {t['comparison']} {t['threshold']} "
                     f"| {'yes' if t['met'] else '**no**'} |")
    return "\n".join(lines) + "\n"


def _scaling(results: dict[str, Any]) -> list[str]:
    s = results["scaling"]
    lines = ["", "## Scaling", ""]
    if s.get("cores"):
        lines += ["| shape | Spark cores | events | ours | seconds |", "|---|---|---|---|---|"]
        lines += [f"| {r['shape']} | {r['spark_cores']} | {r['events']:,} | {_k(r['per_s'])} | {r['seconds']:.2f} |"
                  for r in s["cores"]]
        lines.append("")
    if s.get("growth"):
        lines += ["| events (1 low) | raw consume | ours | seconds | seconds per 1M |", "|---|---|---|---|---|"]
        lines += [f"| {r['events']:,} | {_k(r['raw_consume_per_s'])} | {_k(r['per_s'])} | {r['seconds']:.2f} "
                  f"| {r['seconds'] / r['events'] * 1e6:.2f} |" for r in s["growth"]]
        lines.append("")
    else:
        lines.append("Growth series not run (`--scaling`).\n")
    lines.append(f"Spark standalone cluster: {s.get('spark_standalone')}.")
    return lines


def _profile(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for prof in results.get("profile", []):
        lines += ["", f"## Profile: {prof['shape']} ({prof['events']:,} events through `index_split` in one process, "
                      f"{_k(prof['per_s_one_process'])} events/s)", "", "| where | seconds | share |", "|---|---|---|"]
        lines += [f"| {k} | {c['seconds']:.2f} | {c['share']:.0%} |" for k, c in prof["categories"].items()]
    return lines
