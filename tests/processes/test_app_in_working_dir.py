"""``helix-dbos`` finds the app's module in the working directory, as ``dbos start`` does.

docs/service.md's ``myapp/agents.py``, served with ``HELIX_DBOS_APP=myapp.agents:runtime dbos start``
(``python -m helix_dbos.service``: the working directory is on ``sys.path``), failed under the
``helix-dbos`` console script run from the same folder ("No module named 'myapp'"): a console script
puts its own folder on ``sys.path``, not the working directory. A real console-script process here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from helix_dbos.errors import ConfigurationError
from helix_dbos.loader import load_runtime
from tests.support.procs import SETTINGS_VARS, child_env

AGENTS = '''
import helix_dbos as hx
from pydantic_ai.models.test import TestModel


@hx.tool(replay="safe")
def order_status(order_id: str) -> str:
    """Where an order is."""
    return "shipped"


agent = hx.Agent(name="support", model=TestModel(), tools=[order_status])
runtime = hx.Runtime([agent])          # no URL: the service's configuration decides
'''


def _app(tmp_path: Path) -> str:
    package = f"myapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "agents.py").write_text(AGENTS)
    return package


def test_the_console_script_finds_the_app_in_the_working_directory(tmp_path: Path) -> None:
    package = _app(tmp_path)
    script = Path(sys.executable).parent / "helix-dbos"
    env = child_env(drop=SETTINGS_VARS, extra={"HELIX_DBOS_APP": f"{package}.agents:runtime"})
    proc = subprocess.run([str(script), "start", "support", "where is order 7?", "--db", f"sqlite:///{tmp_path / 'app.sqlite'}", "--json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["status"] == "completed", proc.stdout


def test_an_app_found_nowhere_names_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as refused:
        load_runtime(f"nowhere_{uuid.uuid4().hex[:8]}.agents:runtime")
    assert str(tmp_path) in str(refused.value) and "working directory" in str(refused.value)
    package = _app(tmp_path)  # and once it is there, it is found (installed packages still come first)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    assert load_runtime(f"{package}.agents:runtime").agents.keys() == {"support"}
    assert sys.path[-1] == str(tmp_path)
