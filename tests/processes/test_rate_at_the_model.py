"""A model-request rate holds where the provider counts it: at each request's arrival.

Two processes on one database run sessions of an agent limited to ``model_requests=(4, 2.0)``, its
model pydantic-ai's real ``OpenAIChatModel`` pointed at a loopback provider that logs every request
as it arrives. No 2.0 s window of arrivals may hold more than 4, across both processes: the grant
is taken right before the request goes out, and a request not on its way within the send allowance
of its grant takes a fresh one (``runtime/flow/model_request.py``; docs/scaling.md).
"""

from __future__ import annotations

from bench.stats import max_in_window
from tests.support.procs import child_env, last_json, spawn_module
from tests.support.provider_server import Text, provider_server

LIMIT, PERIOD, EACH = 4, 2.0, 8


def test_no_window_of_arrivals_holds_more_than_the_limit_across_two_processes(db_url: str) -> None:
    from helix_dbos.ledger.migrate import upgrade

    upgrade(db_url)  # before both start: neither races the other's first migration
    with provider_server() as server:
        server.always(Text("ok"))
        procs = [
            spawn_module("tests.scenarios.rate_app", ["--db", db_url, "--url", server.url, "--executor", f"rate-{i}",
                                                     "--sessions", str(EACH), "--limit", str(LIMIT), "--period", str(PERIOD)], child_env())
            for i in range(2)
        ]
        outs = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            outs.append(last_json(out))
        arrivals = sorted(r.at for r in server.requests())
    assert all(o is not None and o["statuses"] == ["completed"] * EACH for o in outs), outs
    assert len(arrivals) == 2 * EACH
    most = max_in_window(arrivals, PERIOD)
    assert most <= LIMIT, f"{most} requests arrived within {PERIOD} s (limit {LIMIT}): {[round(a - arrivals[0], 3) for a in arrivals]}"
