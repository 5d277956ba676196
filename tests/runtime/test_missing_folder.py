"""A SQLite URL whose folder does not exist is refused, naming the folder, by the Python API and the CLI.

A newcomer's ``HELIX_DBOS_DATABASE_URL=sqlite:///nonexistent/dir/x.sqlite`` was met by the CLI with
"no database at ...; run `helix-dbos migrate`" (which does not help), while ``Runtime.launch()``
silently created the whole directory tree. Now both refuse it with a ``configuration_error`` that
names the missing folder, before anything is created. (SQLite only: a Postgres URL has no folder;
its missing database is ``test_cli.py``'s "does not exist on that server".)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai.models.test import TestModel
from typer.testing import CliRunner

import helix_dbos as hx
from helix_dbos.cli.main import app as cli
from helix_dbos.errors import ConfigurationError
from helix_dbos.runtime.floor import registry


def _assert_names_the_folder(message: str, folder: Path) -> None:
    assert str(folder.absolute()) in message and "does not exist" in message, message
    assert "migrate" not in message, message


def test_the_python_api_refuses_a_missing_folder_and_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HELIX_DBOS_DATABASE_URL", raising=False)
    for url, folder in (("sqlite:///nonexistent/dir/x.sqlite", tmp_path / "nonexistent" / "dir"),  # relative, as a newcomer types it
                        (f"sqlite:///{tmp_path / 'gone' / 'x.sqlite'}", tmp_path / "gone")):
        rt = hx.Runtime([hx.Agent("folderless", TestModel())], database_url=url, executor_id="folderless-1")
        with pytest.raises(ConfigurationError) as refused:
            rt.launch()
        assert refused.value.code == "configuration_error"
        _assert_names_the_folder(str(refused.value), folder)
        assert not (tmp_path / "nonexistent").exists() and not (tmp_path / "gone").exists()  # nothing was created
    monkeypatch.setenv("HELIX_DBOS_DATABASE_URL", "sqlite:///nonexistent/dir/x.sqlite")
    with pytest.raises(ConfigurationError) as refused:
        hx.Runtime([hx.Agent("folderless", TestModel())], executor_id="folderless-1").launch()
    _assert_names_the_folder(str(refused.value), tmp_path / "nonexistent" / "dir")
    assert registry.installed() is None  # the failed launch left nothing launched: the process can launch again


def test_a_path_through_a_file_is_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("not a folder")
    with pytest.raises(ConfigurationError) as refused:
        hx.Runtime([hx.Agent("folderless", TestModel())], database_url=f"sqlite:///{tmp_path / 'plain' / 'x.sqlite'}").launch()
    assert f"{tmp_path / 'plain'} is not a folder" in str(refused.value)


@pytest.mark.parametrize("command", [["sessions"], ["calls"], ["show", "abc"], ["migrate"], ["executors"], ["demo"]])
def test_the_cli_refuses_a_missing_folder_from_db_or_the_environment(command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HELIX_DBOS_DATABASE_URL", raising=False)
    runner = CliRunner()
    result = runner.invoke(cli, [*command, "--db", "sqlite:///nonexistent/dir/x.sqlite", "--json"])
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["code"] == "configuration_error"
    _assert_names_the_folder(out["error"], tmp_path / "nonexistent" / "dir")
    monkeypatch.setenv("HELIX_DBOS_DATABASE_URL", "sqlite:///nonexistent/dir/x.sqlite")
    result = runner.invoke(cli, [*command, "--json"])
    assert result.exit_code == 1 and json.loads(result.stdout)["code"] == "configuration_error", result.output
    assert not (tmp_path / "nonexistent").exists()  # nothing was created


def test_the_cli_prints_the_refusals_detail_as_json_not_a_python_repr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HELIX_DBOS_DATABASE_URL", raising=False)
    result = CliRunner().invoke(cli, ["sessions", "--db", "sqlite:///nonexistent/dir/x.sqlite"])
    assert result.exit_code == 1
    text = "".join(result.output.split())  # the console wraps long lines, inside words too
    assert str((tmp_path / "nonexistent" / "dir").absolute()) in text and "doesnotexist" in text, text
    assert '"database_url":"sqlite:///nonexistent/dir/x.sqlite"' in text and "{'" not in text, text
