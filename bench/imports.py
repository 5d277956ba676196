"""Import cost: what a process pays before it can run or recover anything.

Wall time of a fresh interpreter importing helix_dbos three ways (median of ``repeats``): the
package alone (a module of tool and agent definitions), with ``hx.Runtime`` resolved (a worker
that launches: DBOS and SQLAlchemy), and with pydantic-ai too (what the first model request adds).
Then the CLI's answer to ``--help``, and the slowest of its commands' ``--help`` (each should be
well under 0.5 s: the CLI imports DBOS, SQLAlchemy and pydantic-ai only inside the commands).
Plus ``python -X importtime``'s heaviest packages, by the cumulative time of their first import.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBES = {
    "import helix_dbos": "import helix_dbos",
    "+ hx.Runtime": "import helix_dbos as hx; hx.Runtime",
    "+ pydantic_ai": "import helix_dbos as hx; hx.Runtime; import pydantic_ai",
    "python alone": "pass",
}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELIX_DBOS_", "DBOS__"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _wall(code: str) -> float:
    return _run([sys.executable, "-c", code])


def _run(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=_env(), check=True, capture_output=True, timeout=120)
    return time.perf_counter() - t


def _cli(*args: str) -> list[str]:
    """``helix-dbos ARGS`` as the installed script runs it (``python -m helix_dbos.cli`` is the same code)."""
    return [sys.executable, "-m", "helix_dbos.cli", *args]


def cli_commands() -> list[str]:
    """Every subcommand's name, hidden ones included (the demo's worker)."""
    code = "import json, typer.main; from helix_dbos.cli.main import app; print(json.dumps(sorted(typer.main.get_command(app).commands)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), check=True, capture_output=True, text=True, timeout=120)
    return list(json.loads(out.stdout))


def run_imports(repeats: int = 5) -> dict[str, object]:
    for code in PROBES.values():  # warm the OS file cache once, as any second start would be
        _wall(code)
    walls = {name: statistics.median(_wall(code) for _ in range(repeats)) for name, code in PROBES.items()}
    _run(_cli("--help"))
    walls["helix-dbos --help"] = statistics.median(_run(_cli("--help")) for _ in range(repeats))
    per_command = {name: statistics.median(_run(_cli(name, "--help")) for _ in range(3)) for name in cli_commands()}
    slowest = max(per_command, key=per_command.__getitem__)
    walls[f"helix-dbos {slowest} --help (slowest of {len(per_command)} commands)"] = per_command[slowest]
    total, top = import_profile()
    return {"wall_s": walls, "repeats": repeats, "importtime_total_s": total, "top": top, "cli_help_s": per_command}


def import_profile(top: int = 8) -> tuple[float, list[tuple[str, float]]]:
    """Import time of the app (`python -X importtime`): the total, and the heaviest packages by the
    cumulative time of their first import (a package's figure includes what it imports first)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import helix_dbos as hx; hx.Runtime; import pydantic_ai"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    best: dict[str, float] = {}
    total = 0.0
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        try:
            secs = int(cumulative) / 1e6
        except ValueError:  # the header line
            continue
        root = name.strip().split(".")[0]
        if not name.startswith("  "):
            total += secs
        if root in ("helix_dbos", "bench"):
            continue
        best[root] = max(best.get(root, 0.0), secs)
    return total, sorted(best.items(), key=lambda kv: -kv[1])[:top]
