"""Benchmarks: the same scripted agent loop on bare DBOS, on Pydantic AI's DBOS integration, and on helix_dbos.

* `bench.workload`  - the shared deterministic workload (model script + tool bodies + tool schemas).
* `bench.baselines` - `configure_dbos(url)` and the two baseline runners (bare DBOS, pydantic-ai DBOSDurability).
* `bench.harness`   - `measure(...)`, the runner registry (hook for a `helix_dbos` runner) and the CLI.

Run: `python -m bench.baselines --db sqlite|postgres|both -n 20`.
"""
