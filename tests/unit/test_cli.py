"""Every registered command imports, explains itself, and the hook path stays free of heavy imports."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from sro.cli import COMMANDS, cli


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_has_help(name: str) -> None:
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert len(result.output.strip()) > 40


def test_top_level_help_lists_commands_without_importing_them() -> None:
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom sro.cli import cli\n"
        "r = CliRunner().invoke(cli, ['--help'])\nassert r.exit_code == 0\n"
        "heavy = [m for m in ('lightkube', 'grpc', 'kopf', 'jinja2', 'sro.local', 'sro.node') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
