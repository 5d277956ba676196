"""``python -m helix_dbos.cli``: the same command as the ``helix-dbos`` script (the demo spawns its workers so)."""

from .main import app

app(prog_name="helix-dbos")
