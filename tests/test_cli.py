"""The console entry point: every command of DESIGN.md §10 answers --help, in a real subprocess."""

import subprocess
import sys

import pytest

from autokernel_ci.cli import HANDLERS, main

COMMANDS = ["profile", "verify", "bench", "optimize", "run", "publish", "action", "gpu"]


def test_every_design_command_is_declared():
    assert set(COMMANDS) == set(HANDLERS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"autokernel-ci {command}" in capsys.readouterr().out


def test_python_dash_m_and_no_command_exit_2():
    proc = subprocess.run([sys.executable, "-m", "autokernel_ci"], capture_output=True, text=True)
    assert proc.returncode == 2 and "COMMAND" in proc.stdout


def test_bad_argument_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "autokernel_ci", "optimize"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--plan" in proc.stderr
