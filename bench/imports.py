"""Import cost: what a process pays before it can run or recover anything.

Wall time of a fresh interpreter importing helix_dbos three ways (median of ``repeats``): the
package alone (a module of tool and agent definitions), with ``hx.Runtime`` resolved (a worker
that launches: DBOS and SQLAlchemy), and with pydantic-ai too (what the first model request adds).
Plus ``python -X importtime``'s heaviest packages, by the cumulative time of their first import.
"""

from __future__ import annotations

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
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), check=True, capture_output=True, timeout=120)
    return time.perf_counter() - t


def run_imports(repeats: int = 5) -> dict[str, object]:
    for code in PROBES.values():  # warm the OS file cache once, as any second start would be
        _wall(code)
    walls = {name: statistics.median(_wall(code) for _ in range(repeats)) for name, code in PROBES.items()}
    total, top = import_profile()
    return {"wall_s": walls, "repeats": repeats, "importtime_total_s": total, "top": top}


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
