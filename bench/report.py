"""Markdown for docs/benchmarks.md: the generated part of the page, from the results of one run.

Only the region between the two markers is rewritten, so the hand-written analysis around it
(hot spots, proposed fixes) survives a re-run of the bench.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable
from typing import Any

BEGIN = "<!-- bench:generated:begin (python -m bench rewrites this region) -->"
END = "<!-- bench:generated:end -->"

DB_LABEL = {"sqlite": "SQLite (WAL)", "postgres": "Postgres"}


def _f(x: Any, nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def _cell(text: str, limit: int = 140) -> str:
    """One line, no pipes, bounded: error texts go into table cells."""
    text = " ".join(str(text).replace("|", "/").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _table(header: list[str], rows: list[list[Any]], nd: int = 1) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    for r in rows:
        out.append("| " + " | ".join(_f(c, nd) for c in r) + " |")
    return "\n".join(out)


def machine_section(m: dict[str, Any]) -> str:
    rows = [[k, v] for k, v in m.items()]
    return "### Machine\n\n" + _table(["", "value"], rows)


#: The overhead targets, with what they were when first measured ("before", SQLite / Postgres),
#: what "done" means and the goal.
TARGETS = (
    ("helix / bare DBOS, per-run (5 steps x 3 calls)", "3.7x / 4.5x", "<= 1.5x", "<= 1.3x"),
    ("helix / Pydantic AI DBOSDurability", "2.5x / 3.4x", "<= 1.1x", "<= 1.0x"),
    ("transactions per tool call", "4", "<= 2", "2"),
    ("transactions per step with no call (beyond the model request)", "13", "<= 3", "2"),
    ("per-run transactions outside steps", "19", "<= 6", "4"),
    ("statements per call", "19", "<= 6", "4"),
    ("200 sessions at once, one process, Postgres: helix / bare total time", "5.0x", "<= 1.5x", "<= 1.2x"),
    ("idle runtime, statements per second after DBOS's first minute (bare DBOS app in brackets)", "45-67", "<= 5", "<= 1"),
    ("relaunch -> crashed run at rest, from launch() (imports apart), s", "~1.1", "<= 0.5", "<= 0.2"),
    ('`python -c "import helix_dbos"`, wall s', "1.35-1.6", "<= 0.7", "<= 0.4"),
    ("model step time at step 200 of one session / at step 10 (helix's own part: without pydantic-ai's model_request over the history, which any loop sending it pays)", "1.6x", "<= 1.1x", "1.0x"),
)


def _targets_values(results: dict[str, Any], db: str) -> list[str]:
    """This run's value of each TARGETS row on ``db`` ("-" where the section did not run)."""
    def get(path: tuple[str, ...]) -> Any:
        node: Any = results
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return node

    def ratio(a: Any, b: Any) -> str:
        return f"{a / b:.2f}x" if a is not None and b else "-"

    ov = get(("overhead", db, "stats"))
    cost = get(("cost", db, "helix_dbos", "units"))
    # a bare DBOS step with no call is its model request step alone: what "beyond the model request" subtracts
    model_tx = get(("cost", db, "bare_dbos", "units", "step, no call", "tx"))
    conc = {b["runner"].split(" ")[0]: b for b in get(("concurrency", "one_process", db)) or []}
    idle = get(("idle", db))
    rec = get(("recovery", db, "median"))
    st = get(("storage", db, "rows"))
    imp = get(("imports", "wall_s"))
    c = lambda unit, k: f"{cost[unit][k]:.1f}" if cost else "-"  # noqa: E731
    return [
        ratio(ov["helix_dbos"]["mean_ms"], ov["bare_dbos"]["mean_ms"]) if ov else "-",
        ratio(ov["helix_dbos"]["mean_ms"], ov["pydantic_ai_dbos"]["mean_ms"]) if ov else "-",
        c("call", "tx"),
        f"{cost['step, no call']['tx'] - (model_tx or 0):.1f}" if cost else "-",
        c("per-run remainder", "tx"),
        c("call", "stmts"),
        ratio(conc["helix_dbos"]["total_s"], conc["bare_dbos"]["total_s"]) if "helix_dbos" in conc and "bare_dbos" in conc and db == "postgres" else "-",
        f"{idle['helix_dbos']['stmts_per_s']:.1f} ({idle['bare_dbos']['stmts_per_s']:.1f})" if idle else "-",
        f"{rec['from_launch']:.2f}" if rec and "from_launch" in rec else "-",
        f"{imp['import helix_dbos']:.2f}" if imp else "-",
        (f"{ratio(st[-1]['model_request_ms'], st[0]['model_request_ms'])} (helix's own {ratio(st[-1]['model_request_ms'] - st[-1].get('model_ms', 0), st[0]['model_request_ms'] - st[0].get('model_ms', 0))}; "
         f"pydantic-ai's model_request alone {ratio(st[-1].get('model_ms'), st[0].get('model_ms'))})"
         if st and st[-1]["step"] == 200 and st[0]["step"] == 10 else "-"),
    ]


def targets_section(results: dict[str, Any], dbs: list[str]) -> str:
    values = {db: _targets_values(results, db) for db in dbs}
    rows = [[t[0], t[1]] + [values[db][i] for db in dbs] + [t[2], t[3]] for i, t in enumerate(TARGETS)]
    return (
        "### Overhead targets: before and now\n\n"
        "`before` is the first measurement (SQLite / Postgres where it gave two); each figure's command is its "
        "section's (`python -m bench --db both --sections NAME`): overhead (ratios), cost (transactions, statements; "
        "\"beyond the model request\" subtracts what bare DBOS pays for one: its DBOS step), concurrency (200 sessions), idle, recovery "
        "(relaunch), imports, storage (step 200 / step 10).\n\n"
        + _table(["figure", "before"] + [DB_LABEL[db] for db in dbs] + ["done means", "goal"], rows)
        + "\n"
    )


def summary_section(results: dict[str, Any]) -> str:
    ov = results.get("overhead", {})
    if not ov:
        return ""
    dbs = list(ov)
    rows: list[list[Any]] = []

    def ratio(db: str, a: str, b: str, key: str = "mean_ms") -> float:
        s = ov[db]["stats"]
        return s[a][key] / s[b][key]

    rows.append(["helix_dbos / bare DBOS (per-run mean)"] + [ratio(d, "helix_dbos", "bare_dbos") for d in dbs])
    rows.append(["helix_dbos / bare DBOS (p50)"] + [ratio(d, "helix_dbos", "bare_dbos", "p50_ms") for d in dbs])
    rows.append(["helix_dbos / pydantic-ai DBOS (per-run mean)"] + [ratio(d, "helix_dbos", "pydantic_ai_dbos") for d in dbs])
    rows.append(["pydantic-ai DBOS / bare DBOS (per-run mean)"] + [ratio(d, "pydantic_ai_dbos", "bare_dbos") for d in dbs])
    cost = results.get("cost", {})
    if cost:
        rows.append(["transactions per step with 3 calls: helix_dbos"] + [cost[d]["helix_dbos"]["units"]["step with 3 calls"]["tx"] if d in cost else None for d in dbs])
        rows.append(["transactions per step with 3 calls: bare DBOS"] + [cost[d]["bare_dbos"]["units"]["step with 3 calls"]["tx"] if d in cost else None for d in dbs])
    st = results.get("storage", {})
    if st:
        rows.append(["ledger + DBOS live bytes per step at step 10 / 200"] + [
            f"{_f(st[d]['rows'][0]['helix_live'] + st[d]['rows'][0]['dbos_live'], 0)} / {_f(st[d]['rows'][-1]['helix_live'] + st[d]['rows'][-1]['dbos_live'], 0)}" if d in st else None for d in dbs
        ])
    rec = results.get("recovery", {})
    if rec:
        rows.append(["recovery: spawn of the relaunch -> crashed run at rest (median s)"] + [rec[d]["median"]["total"] if d in rec else None for d in dbs])
    conc = results.get("concurrency", {})
    for key, label in (("one_process", "one process"), ("two_workers", "two workers")):
        for d in dbs:
            batches = conc.get(key, {}).get(d)
            if batches:
                b = {x["runner"].split(" ")[0]: x for x in batches}
                if "helix_dbos" in b and "bare_dbos" in b:
                    rows.append([f"{b['helix_dbos']['sessions']} sessions at once, {label}, {DB_LABEL[d]}: total s helix / bare"] + [
                        f"{_f(b['helix_dbos']['total_s'])} / {_f(b['bare_dbos']['total_s'])}"
                        + f" (helix runs ok: {b['helix_dbos']['ok']}/{b['helix_dbos']['sessions']})"
                        if dd == d
                        else "-"
                        for dd in dbs
                    ])
    return "### Summary\n\n" + _table([""] + [DB_LABEL[d] for d in dbs], rows, nd=2)


def overhead_section(results: dict[str, Any], n: int, warmup: int) -> str:
    ov = results.get("overhead", {})
    if not ov:
        return ""
    parts = [
        "### 1-2. Per-run time: helix_dbos vs the floor (bare DBOS loop) and the peer (Pydantic AI DBOSDurability)\n",
        (f"Workload: 5 steps x 3 tool calls + a final text step (6 model requests, 15 tool calls), scripted "
        f"`FunctionModel`, trivial async bodies. n={n} measured runs per runner after {warmup} warm-up runs, "
        "interleaved (bare, pydantic-ai, helix, bare, ...) in one process on one DBOS launch.\n"),
    ]
    for db, data in ov.items():
        s = data["stats"]
        base = s["bare_dbos"]
        rows = []
        for name, x in s.items():
            rows.append([name, int(x["n"]), x["mean_ms"], x["p50_ms"], x["p95_ms"], x["mean_ms"] / base["mean_ms"], x["p50_ms"] / base["p50_ms"],
                         x["mean_ms"] / s["pydantic_ai_dbos"]["mean_ms"]])
        parts.append(f"**{DB_LABEL[db]}**\n")
        parts.append(_table(["runner", "n", "mean ms", "p50 ms", "p95 ms", "x bare (mean)", "x bare (p50)", "x pydantic-ai (mean)"], rows, nd=2))
        if "helix_openai_agents" in s and "dbos_openai_agents" in s:
            h, p = s["helix_openai_agents"], s["dbos_openai_agents"]
            parts.append(f"\nOpenAI Agents SDK, the same workload through its own types (a scripted `agents.Model`, the bodies as "
                         f"`@function_tool`s): helix_openai_agents / dbos_openai_agents = **{h['mean_ms'] / p['mean_ms']:.2f}x** mean, "
                         f"{h['p50_ms'] / p['p50_ms']:.2f}x p50 (dbos-openai-agents leaves function tools as workflow code: "
                         "nothing of a tool call is recorded; helix gates and records each).")
        checks = "; ".join(f"{k}: {'answer OK' if v['answer_ok'] else 'WRONG ANSWER'}, {v['steps']} DBOS steps" for k, v in data["probe"].items())
        parts.append(f"\nProbe run: {checks}.\n")
    return "\n".join(parts)


def cost_section(results: dict[str, Any]) -> str:
    cost = results.get("cost", {})
    if not cost:
        return ""
    parts = [
        "### 3. Write cost: transactions, statements and round trips\n",
        ("Counted with SQLAlchemy events (`begin`/`commit`/`rollback`, `before_cursor_execute`, pool `checkout`) on "
        "DBOS's system-DB engine and, for helix, on `runtime.engine` and the datasource's engine; DBOS's polling "
        "threads are excluded. `tx` = transactions that ran at least one statement; `RTT` = statements + BEGIN + "
        "COMMIT per transaction + one `SELECT 1` per checkout on pre-pinging pools (Postgres estimate; on SQLite "
        "these are calls, not network trips). Units solved exactly from four workload shapes (5x3, 10x3, 5x1, and 5x3 with the calls one at a time: helix writes the gates and the results of calls that run side by side in one transaction each, so `call` is a call on its own and the marginal row what a call beside two others adds).\n"),
    ]
    for db, figs in cost.items():
        units = list(next(iter(figs.values()))["units"])
        rows = []
        for unit in units:
            row: list[Any] = [unit]
            for name in ("bare_dbos", "pydantic_ai_dbos", "helix_dbos"):
                u = figs[name]["units"][unit]
                row += [u["tx"], u["stmts"], u["rtt"]]
            rows.append(row)
        header = ["unit"] + [f"{r} {k}" for r in ("bare", "pai", "helix") for k in ("tx", "stmts", "RTT")]
        parts.append(f"**{DB_LABEL[db]}**\n")
        parts.append(_table(header, rows, nd=1))
        h = figs["helix_dbos"]
        eng = "; ".join(f"{label}: {_f(v['tx'])} tx, {_f(v['stmts'])} stmts" for label, v in h["by_engine_step3"].items())
        tables = ", ".join(f"{t} {_f(v)}" for t, v in sorted(h["by_table_step3"].items(), key=lambda kv: -kv[1]))
        parts.append(f"\nhelix_dbos, one step with 3 calls, by engine: {eng}.  \nStatements by table: {tables}.")
        nondet = [k for k, v in figs.items() if not v["deterministic"]]
        if nondet:
            parts.append(f"\n(Counts varied between repeats for: {', '.join(nondet)}; the lower one is shown.)")
        parts.append("")
        wal = results.get("wal", {}).get(db)
        if wal:
            parts.append(wal_section(wal))
    return "\n".join(parts)


def wal_section(wal: dict[str, Any]) -> str:
    """The cost section's WAL and Postgres CPU per run (``bench.walcount``), both systems."""
    if "error" in wal:
        return f"WAL per run: not measured ({wal['error']}).\n"
    runs = next(iter(wal.values()))["runs"]
    parts = [
        (f"WAL and Postgres CPU per run (5x3 workload, {runs} runs each after 3 warm-up runs, `bench.walcount`): WAL bytes this database's "
         "records carry, full-page images apart (`pg_walinspect`; load-independent); `pg CPU`, this database's backends "
         "(`/proc`, a server on this machine; moves with the load); `exec`, the statements' executor time and calls "
         "(`pg_stat_statements`, when the server preloads it; nested foreign-key checks count as calls on a server "
         "tracking `all`); sequential scans and the rows they read (`pg_stat_user_tables`: a key lookup planned as a scan "
         "reads its whole table, a cost that grows with the ledger); updates of the busiest tables (HOT in brackets).\n"),
    ]
    rows = []
    for name, w in wal.items():
        st = w.get("statements_per_run") or []
        total = st[0] if st else {}
        rels = ", ".join(f"{k} {v / 1000:.1f}" for k, v in list(w["by_relation_per_run"].items())[:5] if k != "(full-page images)")
        upd = ", ".join(f"{k.split('.', 1)[1]} {v['upd']:g} ({v['hot']:g})" for k, v in sorted(w["updates_per_run"].items(), key=lambda kv: -kv[1]["upd"])[:3])
        scans = w.get("seq_scans_per_run", {})
        seq = f"{sum(v['scans'] for v in scans.values()):g} ({sum(v['rows'] for v in scans.values()):g} rows)"
        rows.append([name, w["wal_bytes_per_run"] / 1000, w.get("pg_cpu_ms_per_run"), total.get("exec_ms"), total.get("calls"), seq, rels, upd])
    parts.append(_table(["system", "WAL KB/run", "pg CPU ms/run", "exec ms/run", "statements/run", "seq scans/run", "WAL KB by relation (top 5)",
                         "updates/run (HOT)"], rows, nd=1))
    helix = wal.get("helix_dbos", {}).get("statements_per_run") or []
    if len(helix) > 1:
        parts.append("\nhelix_dbos, statements by executor time per run:\n")
        parts.append(_table(["statement", "calls/run", "exec ms/run", "WAL B/run"],
                            [[f"`{_cell(r['query'], 110)}`", r["calls"], r["exec_ms"], r["wal_bytes"]] for r in helix[1:]], nd=2))
    parts.append("")
    return "\n".join(parts)


def storage_section(results: dict[str, Any]) -> str:
    st = results.get("storage", {})
    if not st:
        return ""
    parts = [
        "### 4. Storage growth of one long session\n",
        ("One session, 20 turns of 10 steps (9 steps x 3 tool calls + a text answer), each turn a new run "
        "(`runtime.start(agent, msg, session_id=sid)`), helix configuring DBOS itself (JSON serializer). "
        "Bytes added per step over the turn that ends at the given step. `live` = bytes of live rows "
        "(Postgres `pg_column_size`, SQLite `dbstat` payload): exact, the figure to compare; `disk` = "
        "`pg_total_relation_size` / SQLite pages (page-granular, includes dead row versions until vacuum). "
        "`model step ms`: wall time inside the model-request step per step; of it, the time inside pydantic-ai's "
        "`model_request` (the scripted model, which digests the whole history, and pydantic-ai's message "
        "handling: work any loop pays) and the time spent reading the session's new messages from the ledger "
        "and validating them.\n"),
    ]
    for db, data in st.items():
        rows = []
        for r in data["rows"]:
            row = [r["step"], r["ms_per_step"], r.get("model_request_ms"), r.get("model_ms"), r.get("transcript_ms"), r["helix_live"], r["dbos_live"], r["helix_live"] + r["dbos_live"], r["helix_disk"], r["dbos_disk"]]
            if "file_disk" in r:
                row.append(r["file_disk"])
            row.append(r["helix_live_total"] + r["dbos_live_total"])
            rows.append(row)
        header = ["at step", "ms/step", "model step ms", "of which the model request ms", "transcript read+validate ms", "ledger live B/step", "DBOS live B/step", "total live B/step", "ledger disk B/step", "DBOS disk B/step"]
        if any("file_disk" in r for r in data["rows"]):
            header.append("file B/step")
        header.append("total live B")
        parts.append(f"**{DB_LABEL[db]}**\n")
        parts.append(_table(header, rows, nd=0))
        fl = data["first_last"]
        parts.append(
            f"\nLargest DBOS payloads, first turn vs last turn: model-step output {fl['first turn']['max_model_step_output']} B vs "
            f"{fl['last turn']['max_model_step_output']} B; any step output {fl['first turn']['max_step_output']} B vs "
            f"{fl['last turn']['max_step_output']} B; workflow input {fl['first turn']['max_workflow_input']} B vs {fl['last turn']['max_workflow_input']} B."
        )
        top = ", ".join(f"{k} {_f(v, 0)}" for k, v in sorted(data["per_table_last"].items(), key=lambda kv: -kv[1]) if v)
        parts.append(f"Live bytes per step in the last turn, by table: {top}.")
        parts.append("")
    return "\n".join(parts)


def recovery_section(results: dict[str, Any]) -> str:
    rec = results.get("recovery", {})
    if not rec:
        return ""
    parts = [
        "### 5. Recovery latency\n",
        ("A child process runs the workload and is killed by `HELIX_DBOS_CRASH_AT=before_body:score` (its attempt "
        "committed, its body not run, `os._exit(97)`); a new process with the same executor id relaunches. Medians "
        "of the repetitions, seconds, measured from the spawn of the relaunch process (`runtime.launch() -> run at rest` "
        "is the figure with imports apart). `launch -> crashed call re-run` "
        "is when the crashed call's 2nd attempt started (ledger); `re-run -> run at rest` is the rest of the run "
        "(4 more steps and the answer).\n"),
    ]
    keys = [("interpreter", "interpreter start"), ("imports", "imports"), ("launch", "runtime.launch()"), ("launch_to_rest", "launch -> run at rest"),
            ("from_launch", "runtime.launch() -> run at rest"),
            ("to_rerun", "spawn -> crashed call re-run"), ("rerun_to_end", "re-run -> run at rest"), ("total", "spawn -> run at rest")]
    dbs = list(rec)
    rows = [[label] + [rec[d]["median"][k] for d in dbs] for k, label in keys]
    phases = sorted({p for d in dbs for p in rec[d]["launch_phases"]})
    for p in phases:
        rows.append([f"  in launch: {p}"] + [rec[d]["launch_phases"].get(p) for d in dbs])
    parts.append(_table(["phase (median s)"] + [f"{DB_LABEL[d]} (n={rec[d]['repeats']})" for d in dbs], rows, nd=3))
    ok = all(rec[d]["all_ok"] for d in dbs)
    parts.append(f"\nEvery recovered run completed with the right answer: {'yes' if ok else 'NO'}.")
    return "\n".join(parts) + "\n"


def idle_section(results: dict[str, Any]) -> str:
    idle = results.get("idle", {})
    if not idle:
        return ""
    parts = [
        "### 7. An idle runtime\n",
        ("Statements per second over a window with no work, on every engine of the process (DBOS's system database, "
        "the ledger's engines, the executor lock's connection): a helix runtime with one agent (no remote or companion "
        "sub-agent: it does not serve the children's queue) against a bare DBOS app with one workflow registered "
        "(DBOS's defaults), each in its own process at the same time. `steady` opens after DBOS's first minute (its "
        "scheduler polls once a second for 60 s after launch, then every 30 s): what a worker idle for hours costs, "
        "and the figure of the table above; `first minute` opens 6 s after launch. Top tables of the steady window.\n"),
    ]
    rows = []
    for db, data in idle.items():
        for name, r in data.items():
            tables = ", ".join(f"{k} {_f(v)}" for k, v in list(r["by_table_per_s"].items())[:6])
            early = r.get("early", {}).get("stmts_per_s")
            rows.append([DB_LABEL[db], name, r["stmts_per_s"], early if early is not None else "-", r["seconds"], _cell(tables, 200)])
    parts.append(_table(["database", "system", "statements/s, steady", "statements/s, first minute", "window s", "by table (/s)"], rows, nd=1))
    return "\n".join(parts) + "\n"


def imports_section(results: dict[str, Any]) -> str:
    imp = results.get("imports")
    if not imp:
        return ""
    rows = [[name, secs] for name, secs in imp["wall_s"].items()]
    return (
        "### 8. Import time\n\n"
        f"Wall time of `python -c CODE` in a fresh interpreter, and of the CLI's `--help` (median of {imp['repeats']}, "
        "after one warm-up run each; each command's `--help` median of 3).\n\n"
        + _table(["CODE or command", "wall s"], rows, nd=3)
        + f"\n\n`python -X importtime` of the last row: {imp['importtime_total_s']:.2f} s in all; heaviest packages (cumulative, first import): "
        + ", ".join(f"{k} {v:.2f} s" for k, v in imp["top"])
        + ".\n"
    )


def takeover_section(results: dict[str, Any]) -> str:
    tk = results.get("takeover", {})
    if not tk:
        return ""
    rows = [[DB_LABEL[db], r["kills"], r["takeover_after"], r["under_way_median"], r["under_way_worst"], r["at_rest_median"], r["at_rest_worst"]] for db, r in tk.items()]
    return (
        "### 9. Worker loss: death to runs under way again\n\n"
        "A worker is SIGKILLed mid-body while a second worker with another executor id is alive; the time from the "
        "kill to the killed call's next attempt starting on the live worker, and to the run at rest (`bench/takeover.py`, "
        "docs/operations.md).\n\n"
        + _table(["database", "kills", "HELIX_DBOS_TAKEOVER_AFTER s", "under way: median s", "worst s", "at rest: median s", "worst s"], rows, nd=2)
        + "\n"
    )


def concurrency_section(results: dict[str, Any]) -> str:
    conc = results.get("concurrency", {})
    if not conc:
        return ""
    parts = [
        "### 6. Concurrency: sessions started at once\n",
        ("One process: N runs started at once from N threads (`DBOS.start_workflow` for bare DBOS, `runtime.start(...)"
        ".result()` for helix), per-run latency from start call to result. Two workers: two `bench.worker` processes "
        "on one Postgres serve DBOS queues; this process enqueues (helix: gate + `DBOSClient.enqueue_in_transaction` "
        "in one transaction), latency from enqueue to the run's end, read from the database. Connection pools are "
        "capped (see `bench/pools.py`), queues get `worker_concurrency = N / workers`.\n"),
    ]
    rows = []
    for key, label in (("one_process", "one process"), ("two_workers", "two workers")):
        for db, batches in conc.get(key, {}).items():
            by = {b["runner"]: b for b in batches}
            for b in batches:
                bare = next((x for name, x in by.items() if name.startswith("bare_dbos")), None)
                ratio = b["total_s"] / bare["total_s"] if bare else float("nan")
                execs = ", ".join(f"{k}: {v}" for k, v in sorted(b["by_executor"].items())) or "-"
                bad = {_cell(k): v for k, v in b["statuses"].items() if not k.startswith(("completed", "SUCCESS", "str"))}
                rows.append([f"{label}, {DB_LABEL[db]}", b["runner"], b["sessions"], f"{b['ok']}/{b['sessions']}", b["total_s"], b["runs_per_s"],
                             b["p50_s"], b["p95_s"], b["max_s"], ratio, execs + (f"; failures: {bad}" if bad else "")])
    parts.append(_table(["setup", "runner", "sessions", "ok", "total s", "runs/s", "p50 s", "p95 s", "max s", "total x bare", "runs per worker"], rows, nd=2))
    return "\n".join(parts) + "\n"


def generated(results: dict[str, Any], meta: dict[str, Any]) -> str:
    parts = [
        BEGIN,
        f"## Results ({meta['machine']['date']})\n",
        f"Command: `{meta['command']}` (took {meta['elapsed_s']:.0f} s: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in meta.get("timings", {}).items())
        + ").\n",
        machine_section(meta["machine"]),
        targets_section(results, meta.get("dbs", ["sqlite", "postgres"])),
        summary_section(results),
        issue25_table(results),
        cost_targets_table(results),
        overhead_section(results, meta["n"], meta["warmup"]),
        cost_section(results),
        storage_section(results),
        recovery_section(results),
        concurrency_section(results),
        scale_section(results),
        idle_section(results),
        imports_section(results),
        takeover_section(results),
        END,
    ]
    return "\n\n".join(p for p in parts if p)


def write(path: str, body: str, preamble: str) -> None:
    """Replace the generated region of `path` (or create the page with `preamble` around it)."""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            text = head + body + tail
        else:
            text = text.rstrip() + "\n\n" + body + "\n"
    else:
        text = preamble.rstrip() + "\n\n" + body + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


SCALE_COST = (
    ("wall s", "total_s", 1.0, False),
    ("worker CPU ms/run", "worker_cpu_s", 1000.0, True),
    ("pg CPU ms/run, this db, sampled", "pg_cpu_sampled_s", 1000.0, True),
    ("pg CPU ms/run, server, exact", "pg_cpu_server_s", 1000.0, True),
    ("pg busy ms/run", "pg_busy_s", 1000.0, True),
    ("backends opened/run", "backends_opened", 1.0, True),
    ("WAL KB/run, this db", "wal_db_bytes", 0.001, True),
    ("WAL KB/run, server", "wal_server_bytes", 0.001, True),
    ("front CPU ms/run", "front_cpu_s", 1000.0, True),
)
"""(label, key, scale, per run) of the figures the scale section sets side by side."""


def _scale_value(b: dict[str, Any], key: str, mult: float, per_run: bool) -> float | None:
    v = b.get(key)
    if v is None and key == "pg_cpu_sampled_s":  # results saved before the watcher: its sampled figure's old name
        v = b.get("pg_cpu_s")
    if v is None:
        return None
    return float(v) * mult / (b["sessions"] if per_run else 1)


def _shape_of(b: dict[str, Any]) -> str:
    return str(b.get("shape") or b["runner"].split("_")[0])


def _scale_rows(batches: list[dict[str, Any]], workers: str) -> tuple[list[list[Any]], list[list[Any]]]:
    """(time rows, cost rows) of one worker count's batches."""
    floor = next((b for b in batches if _shape_of(b) == "floor"), None)
    bare = next((b for b in batches if _shape_of(b) == "bare"), None)
    time_rows, cost_rows = [], []
    for b in batches:
        execs = ", ".join(f"{k}: {v}" for k, v in sorted(b["by_executor"].items())) or "-"
        ref = floor or bare
        time_rows.append([b["runner"], workers, b["sessions"], f"{b['ok']}/{b['sessions']}" + ("" if b.get("answer_ok", True) is not False else " WRONG ANSWER"),
                          b["enqueue_s"], b["total_s"], b["runs_per_s"], b["p50_s"], b["p95_s"], b["max_s"],
                          b["total_s"] / ref["total_s"] if ref else None, execs])
        peak = b.get("peak_conns") or {}
        opened = b.get("backends_opened")
        cost_rows.append([
            b["runner"],
            *[_scale_value(b, key, mult, per) for _, key, mult, per in SCALE_COST[1:5]],
            f"{opened / b['sessions']:.2f} ({opened:,}; seen {b.get('backends_seen', '-')})" if opened is not None else "-",
            f"{peak.get('worker', '-')} / {peak.get('front', '-')} ({b.get('peak_conns_total', '-')})" if peak else "-",
            *[_scale_value(b, key, mult, per) for _, key, mult, per in SCALE_COST[6:]],
        ])
    return time_rows, cost_rows


def _scale_ratios(batches: list[dict[str, Any]]) -> list[list[Any]]:
    """helix / floor, helix / bare, helix / peer, for every figure both sides have."""
    by = {_shape_of(b): b for b in batches}
    helix = by.get("helix")
    if helix is None:
        return []
    rows = []
    for label, key, mult, per in SCALE_COST:
        h = _scale_value(helix, key, mult, per)
        row: list[Any] = [label]
        for other in ("floor", "bare", "peer"):
            o = by.get(other)
            v = _scale_value(o, key, mult, per) if o else None
            row.append(f"{h / v:.2f}x" if h is not None and v else "-")
        rows.append(row)
    return rows


SCALE_NOTES = (
    "Shapes, side by side in one run: `floor_dbos_steps`, a DBOS workflow of plain `@DBOS.step` functions, the same 5 steps x 3 calls, "
    "no pydantic-ai (the floor any durable loop on DBOS pays); `bare_dbos`, the pydantic-ai loop hand-written on DBOS; "
    "`peer_pydantic_ai_dbosagent`, Pydantic AI's own `DBOSAgent`, its `bench_peer.run` workflow enqueued by name (the peer a user "
    "would pick instead); `helix_dbos`. Each batch (a worker count, a shape, a round) runs in a fresh database of its own, "
    "dropped after it, with fresh worker processes serving only that shape's queue; "
    "floor, bare and peer enqueue with `DBOSClient.enqueue`, helix through `Runtime(mode=\"client\").start` (gate + enqueue in one "
    "transaction), 5 threads each. The same DBOS queue settings everywhere: `worker_concurrency` = sessions / workers, polled every "
    "0.1 s (helix's entry queue is partitioned by owner: one partition here). Latency: enqueue to rest, from the database.\n\n"
    "Cost (`bench/pgwatch.py`, all on this machine): worker and front CPU from /proc over the batch (the front's without the "
    "watcher's sampling thread, which runs in its process). Postgres CPU three ways: "
    "`this db, sampled` is every backend of the database seen by a 0.1 s sampler, at its last sample (a lower bound: a backend "
    "that lives between two samples counts nothing, an exiting one up to its last sample); `server, exact` is every process of the "
    "Postgres server (the postmaster's live children, plus its reaped children's `cutime + cstime`: every short-lived backend in "
    "full, and the WAL writer, checkpointer, autovacuum) but also every other database's work: exact on a server the bench has to "
    "itself, an upper bound on a shared one; `busy` is `pg_stat_database.active_time` (every backend of the database, flushed at "
    "exit), wall time in statements, so it includes waits. Backends opened: `pg_stat_database.sessions` delta, exact (the bench's "
    "own connections are opened before the batch), with how many of them the sampler saw. Peak connections: the most this database's backends held by one "
    "worker process / by the front end (and by all at once), from `client_port` matched to each process's sockets at every sample. "
    "WAL: `this db` is the records whose blocks are in this database, full-page images apart (`pg_walinspect` over the batch's range, "
    "kept by a temporary replication slot); `server`, the LSN delta, every database and full-page images included.\n"
)


def scale_section(results: dict[str, Any]) -> str:
    scale = results.get("scale", {})
    if not scale:
        return ""
    time_rows: list[list[Any]] = []
    cost_rows: list[list[Any]] = []
    ratio_parts: list[str] = []
    for workers, batches in scale.get("batches", {}).items():
        t, c = _scale_rows(batches, workers)
        time_rows += t
        cost_rows += c
        ratios = _scale_ratios(batches)
        if ratios:
            ratio_parts += [f"\n**helix / the others, {workers} worker(s), {batches[0]['sessions']:,} sessions**\n",
                            _table(["figure", "helix / floor", "helix / bare", "helix / peer"], ratios)]
    parts = ["### Scale: a front end that only enqueues, 1 and 2 workers, every shape side by side, Postgres (`bench/scale.py`)\n", SCALE_NOTES]
    if time_rows:
        parts += [
            _table(["runner", "workers", "sessions", "ok", "enqueue s", "wall s", "runs/s", "p50 s", "p95 s", "max s", "wall x floor", "runs per worker"], time_rows, nd=2),
            "",
            _table(["runner", "worker CPU ms/run", "pg CPU ms/run (this db, sampled)", "pg CPU ms/run (server, exact)", "pg busy ms/run",
                    "backends opened/run (total; seen)", "peak conns per worker / front (all)", "WAL KB/run (this db)", "WAL KB/run (server)",
                    "front CPU ms/run"], cost_rows, nd=1),
            *ratio_parts,
        ]
    repeated = repeats_section(results)
    if repeated:
        parts.append(repeated)
    big = scale.get("big")
    if big:
        parts.append(big_section(big))
    lim = scale.get("limits")
    if lim:
        c, r, f = lim["capped"], lim["rated"], lim["fairness"]
        parts += [
            f"\nLimits and fairness, read back from the ledger: two fresh workers with room for {lim['worker_concurrency']} runs each, "
            f"`owner_share={lim['owner_share']}`. `{c['sessions']}` sessions of an agent with `max_running={lim['cap']}`; "
            f"`{r['sessions']}` of an agent with `model_requests=({lim['rate']}, 1.0)`, side by side; then owner `burst` "
            f"enqueues {f['burst']} sessions and owner `solo` one.\n",
            _table(["figure", "measured"], [
                [f"max_running={lim['cap']}: most runs in flight at once (ledger started_at..ended_at)", f"{c['max_in_flight']} ({c['completed']}/{c['sessions']} completed; by worker: " + ", ".join(f"{k}: {v}" for k, v in sorted(c["by_executor"].items())) + ")"],
                [f"max_running={lim['cap']}: times exceeded (a run started with {lim['cap']} in flight)", c["times_exceeded"]],
                [f"model_requests=({lim['rate']}, 1 s): grants, most in any 1 s window", f"{r['grants']} grants over {r['span_s']:.1f} s, most {r['max_in_any_1s']} ({r['completed']}/{r['sessions']} completed; by worker: " + ", ".join(f"{k}: {v}" for k, v in sorted(r["by_executor"].items())) + ")"],
                ["rate: most in any window / limit", r["max_over_limit"]],
                ["fairness: solo's wait (started - created) s / one run's time s (median of the burst)", f"{f['solo_wait_s']:.2f} / {f['one_run_s']:.2f} = {f['wait_over_one_run']:.2f}"],
                ["fairness: burst runs queued before solo that started after it", f"{f['burst_overtaken']} (burst runs done when solo ended: {f['burst_done_when_solo_ended']})"],
            ], nd=2),
        ]
    return "\n".join(parts) + "\n"




def big_section(big: dict[str, Any]) -> str:
    """The large batch against docs/scaling.md's capacity model: predicted and measured steps a second, and CPU per step."""
    m = big["model"]
    t, c = _scale_rows(big["batches"], str(big["workers"]))
    rows = [["worker CPU ms/step", m["worker_ms_per_step"], *[b["worker_ms_per_step"] for b in big["batches"]]],
            ["Postgres CPU ms/step (measured: server, exact)", m["pg_ms_per_step"], *[b["pg_ms_per_step"] for b in big["batches"]]],
            ["front CPU ms/run", m["front_ms_per_run"], *[b["front_ms_per_run"] for b in big["batches"]]],
            [f"steps/s ({big['workers']} workers, each its own core)", m["steps_per_s_own_cores"], *[b["steps_per_s"] for b in big["batches"]]],
            [f"steps/s (this machine: {big['cores']} cores for every process)", m["steps_per_s_this_machine"], *[b["steps_per_s"] for b in big["batches"]]],
            ["measured / predicted (this machine; the model is helix's, the floor beside it for scale)", 1.0, *[b["steps_per_s"] / m["steps_per_s_this_machine"] for b in big["batches"]]]]
    return "\n".join([
        f"\n**{big['sessions']:,} sessions on {big['workers']} worker processes ({big.get('concurrency', '-')} runs in flight per worker), against docs/scaling.md's capacity model**\n",
        ("The model (docs/scaling.md, \"Capacity model\"): a step (6 a run) costs a worker 24 ms and Postgres 9 ms of CPU, an enqueue "
         "the front end 11.3 ms; so W workers carry W x 1000 / 24 steps a second when each has a core, and on one machine where every "
         "process shares the cores at most cores x 1000 / (24 + 9 + 11.3 / 6). Measured: steps a second over the batch's wall time, and "
         "the CPU each side spent per step.\n"),
        _table(["runner", "workers", "sessions", "ok", "enqueue s", "wall s", "runs/s", "p50 s", "p95 s", "max s", "wall x floor", "runs per worker"], t, nd=2),
        "",
        _table(["runner", "worker CPU ms/run", "pg CPU ms/run (this db, sampled)", "pg CPU ms/run (server, exact)", "pg busy ms/run",
                "backends opened/run (total; seen)", "peak conns per worker / front (all)", "WAL KB/run (this db)", "WAL KB/run (server)",
                "front CPU ms/run"], c, nd=1),
        "",
        _table(["figure", "model", *[b["runner"] for b in big["batches"]]], rows, nd=1),
    ]) + "\n"


def issue25_table(results: dict[str, Any]) -> str:
    """The issue's targets, filled from this invocation's sections (ratios side by side in one run)."""
    rows: list[list[Any]] = []
    batches = results.get("scale", {}).get("batches", {})
    for workers in sorted(batches):
        bs = batches[workers]
        bare = next((b for b in bs if b["runner"].startswith("bare_dbos")), None)
        helix = next((b for b in bs if b["runner"].startswith("helix_dbos")), None)
        if bare and helix:
            rows.append([f"{workers} worker(s), {helix['sessions']:,} sessions: helix front end + workers / bare DBOS queues, total time",
                         f"{helix['total_s'] / bare['total_s']:.2f}x ({helix['total_s']:.1f} s / {bare['total_s']:.1f} s)"])
    ov = results.get("overhead", {}).get("postgres")
    if ov:
        st = ov["stats"]
        rows.append(["per run, one process, Postgres: helix / bare DBOS (mean)",
                     f"{st['helix_dbos']['mean_ms'] / st['bare_dbos']['mean_ms']:.2f}x ({st['helix_dbos']['mean_ms']:.1f} ms / {st['bare_dbos']['mean_ms']:.1f} ms; p50 {st['helix_dbos']['p50_ms'] / st['bare_dbos']['p50_ms']:.2f}x)"])
    lim = results.get("scale", {}).get("limits")
    if lim:
        rows.append([f"per-agent concurrency limit ({lim['cap']}) exceeded", f"{lim['capped']['times_exceeded']} times (most in flight {lim['capped']['max_in_flight']})"])
        rows.append([f"rate limit across 2 workers ({lim['rate']}/s), requests in any window / limit", f"{lim['rated']['max_over_limit']:.2f}"])
        f = lim["fairness"]
        rows.append([f"fairness: a second owner's session behind a burst of {f['burst']:,}, wait / one run's time", f"{f['wait_over_one_run']:.2f} ({f['solo_wait_s']:.2f} s / {f['one_run_s']:.2f} s)"])
    if not rows:
        return ""
    return "### Scale targets\n\n" + _table(["figure", "measured"], rows, nd=2)


#: Pools of one helix worker the scale section starts (``bench.pools.WORKER_POOLS``: API 3, ledger
#: transactions 8, DBOS 8) plus DBOS's LISTEN connection and the executor lock's; and its front end's
#: one API pool of 5 (``bench.scale._front_for``). docs/operations.md's formula with the bench's sizes.
HELIX_WORKER_FOOTPRINT = 3 + 8 + 8 + 1 + 1
HELIX_FRONT_FOOTPRINT = 5


def _cpu_ms(b: dict[str, Any]) -> float | None:
    """Worker + Postgres (server, exact; sampled where not read) + front end CPU per run, ms."""
    pg = b.get("pg_cpu_server_s") or b.get("pg_cpu_sampled_s") or b.get("pg_cpu_s")
    if pg is None:
        return None
    return (b["worker_cpu_s"] + pg + b["front_cpu_s"]) * 1000.0 / b["sessions"]


def _pg_ms(b: dict[str, Any], key: str = "pg_cpu_server_s") -> float | None:
    v = b.get(key) or (b.get("pg_cpu_sampled_s") if key == "pg_cpu_server_s" else None)
    return None if v is None else float(v) * 1000.0 / b["sessions"]


def _round_ratios(rounds: list[dict[str, Any]]) -> list[tuple[str, list[float | None], float, str]]:
    """helix / bare of each round (``--scale-repeats``): wall, CPU per run, Postgres CPU per run."""

    def ratio(fn: Callable[[dict[str, Any]], float | None], rnd: dict[str, Any]) -> float | None:
        h, b = (fn(rnd[k]) if k in rnd else None for k in ("helix", "bare"))
        return h / b if h is not None and b else None

    def wall(b: dict[str, Any]) -> float:
        return float(b["total_s"])

    return [
        ("wall", [ratio(wall, r) for r in rounds], 1.2, "<= 1.2x (goal 1.0x)"),
        ("CPU per run (workers + Postgres + front)", [ratio(_cpu_ms, r) for r in rounds], 1.2, "<= 1.2x (goal 1.0x)"),
        ("Postgres CPU per run (server, exact)", [ratio(_pg_ms, r) for r in rounds], 1.5, "<= 1.5x, then 1.2x"),
    ]


def repeats_section(results: dict[str, Any]) -> str:
    """Every round of ``--scale-repeats``: bare and helix a round, their ratios, and the median."""
    parts: list[str] = []
    for workers, rounds in sorted(results.get("scale", {}).get("repeats", {}).items()):
        if len(rounds) < 2:
            continue
        rows: list[list[Any]] = []
        ratios = _round_ratios(rounds)
        for i, rnd in enumerate(rounds, 1):
            h, b = rnd.get("helix"), rnd.get("bare")
            if h is None or b is None:
                continue
            rows.append([i, f"{b['total_s']:.1f} / {h['total_s']:.1f}", f"{_cpu_ms(b) or 0:.1f} / {_cpu_ms(h) or 0:.1f}",
                         f"{_pg_ms(b) or 0:.1f} / {_pg_ms(h) or 0:.1f}",
                         *[f"{ratio[i - 1]:.2f}x" if ratio[i - 1] is not None else "-" for _, ratio, _, _ in ratios]])
        medians = []
        for _, ratio, _, _ in ratios:
            values = [r for r in ratio if r is not None]
            medians.append(f"**{statistics.median(values):.2f}x**" if values else "-")
        rows.append(["median", "", "", "", *medians])
        parts += [f"\n**{workers} worker(s): bare and helix, {len(rounds)} rounds** (round 1 is the side-by-side batch above; "
                  "each later round runs bare then helix on fresh workers)\n",
                  _table(["round", "wall s, bare / helix", "CPU ms/run, bare / helix", "Postgres CPU ms/run, bare / helix",
                          "wall helix / bare", "CPU helix / bare", "Postgres CPU helix / bare"], rows)]
    return "\n".join(parts)


def cost_targets_table(results: dict[str, Any]) -> str:
    """The scale targets on cost, each worker count's shapes side by side in one run: helix against
    the pydantic-ai loop on bare DBOS (``bare``), Pydantic AI's DBOS agent (``peer``) and the plain
    DBOS-steps floor; backends opened against the pools' size."""
    rows: list[list[Any]] = []

    def add(figure: str, value: float | None, shown: str, target: float | None, target_text: str) -> None:
        met = "-" if value is None or target is None else ("yes" if value <= target else "no")
        rows.append([figure, shown if value is not None else "-", target_text, met])

    for workers, bs in sorted(results.get("scale", {}).get("batches", {}).items()):
        by = {_shape_of(b): b for b in bs}
        helix = by.get("helix")
        if helix is None:
            continue
        n = helix["sessions"]
        head = f"{workers} worker(s), {n:,} sessions"
        for other, name, wall_t, cpu_t in (("bare", "pydantic-ai loop on bare DBOS", (1.2, "<= 1.2x (goal 1.0x)"), (1.2, "<= 1.2x (goal 1.0x)")),
                                           ("peer", "Pydantic AI's DBOS agent", (1.0, "<= 1.0x"), (1.0, "<= 1.0x"))):
            o = by.get(other)
            if o is None:
                continue
            w = helix["total_s"] / o["total_s"]
            add(f"{head}: wall, helix / {name}", w, f"{w:.2f}x ({helix['total_s']:.1f} s / {o['total_s']:.1f} s)", *wall_t)
            hc, oc = _cpu_ms(helix), _cpu_ms(o)
            if hc is not None and oc:
                add(f"{head}: CPU per run (workers + Postgres + front), helix / {name}", hc / oc, f"{hc / oc:.2f}x ({hc:.1f} / {oc:.1f} ms)", *cpu_t)
        for other, name in (("bare", "pydantic-ai loop on bare DBOS"), ("floor", "plain DBOS steps")):
            o = by.get(other)
            hp, op = _pg_ms(helix), _pg_ms(o) if o else None
            if o is None or hp is None or not op:
                continue
            hs, os_ = _pg_ms(helix, "pg_cpu_sampled_s"), _pg_ms(o, "pg_cpu_sampled_s")
            sampled = f"; sampled {hs / os_:.2f}x" if hs and os_ else ""
            add(f"{head}: Postgres CPU per run (server, exact), helix / {name}", hp / op, f"{hp / op:.2f}x ({hp:.1f} / {op:.1f} ms{sampled})",
                1.5 if other == "bare" else None, "<= 1.5x, then 1.2x" if other == "bare" else "(for scale)")
        rounds = results["scale"].get("repeats", {}).get(workers, [])
        if len(rounds) > 1:
            for figure, ratio, target, target_text in _round_ratios(rounds):
                values = [r for r in ratio if r is not None]
                if values:
                    mid = statistics.median(values)
                    add(f"{head}: {figure}, helix / pydantic-ai loop on bare DBOS, median of {len(values)} rounds", mid,
                        f"{mid:.2f}x (rounds: {', '.join(f'{r:.2f}x' for r in values)})", target, target_text)
        pools = int(workers) * HELIX_WORKER_FOOTPRINT + HELIX_FRONT_FOOTPRINT
        opened = helix.get("backends_opened")
        if opened is not None:
            per_1000 = opened * 1000.0 / max(n, 1000)  # a batch under 1,000 runs: all it opened
            add(f"{head}: helix backends opened per 1,000 runs (pools' size {pools})", per_1000, f"{per_1000:.0f} ({opened:,} in the batch)",
                pools + 10, f"<= {pools + 10} (pools + 10)")
        total = helix.get("peak_conns_total")
        if total is not None:
            add(f"{head}: helix connections held at once, most", float(total), str(total), float(pools), f"<= {pools} (pools)")
    if not rows:
        return ""
    return "### Scale cost targets\n\n" + _table(["figure", "measured", "target", "met"], rows, nd=2)
