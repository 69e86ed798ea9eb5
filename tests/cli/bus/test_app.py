"""`orch bus tail --json` (docs/outputs.md): the bus's last lines as the model reads them back, a line a shared
worker appended by hand kept as it is, and --json with --follow refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.cli.outputs import BusTailOutput
from orch.run import bus
from orch.run.folder import RunFolder
from tests.helpers import orch, run_info

pytestmark = pytest.mark.pure


@pytest.fixture
def run(tmp_path: Path) -> RunFolder:
    folder = RunFolder.for_name("tailrun")
    folder.create(run_info("tailrun", workers=2, workdir=str(tmp_path)))
    return folder


def test_tail_json_gives_each_line_as_the_bus_wrote_it(run: RunFolder) -> None:
    bus.post(run, 2, "first\nof two")
    bus.post(run, None, "from the lead")
    with run.bus.open("a") as fh:  # a shared worker can write anything into bus.md
        fh.write('[W1] {"not": "a bus line"}\n')
    result = orch("bus", "tail", "tailrun", "--json", "--lines", "2")
    assert result.exit_code == 0, result.output
    shown = BusTailOutput.model_validate_json(result.output)
    assert shown.run == "tailrun"
    assert [(line.sender, line.text) for line in shown.lines] == [("lead", "from the lead")]
    assert shown.unparsed == ['[W1] {"not": "a bus line"}']
    every = BusTailOutput.model_validate_json(orch("bus", "tail", "tailrun", "--json").output)
    assert [line.text for line in every.lines] == ["first\\nof two", "from the lead"]


def test_tail_json_of_an_empty_bus_and_with_follow(run: RunFolder) -> None:
    empty = BusTailOutput.model_validate_json(orch("bus", "tail", "tailrun", "--json").output)
    assert empty.lines == [] and empty.unparsed == []
    both = orch("bus", "tail", "tailrun", "--json", "--follow")
    assert both.exit_code == 2 and "--json prints one document" in both.output
    assert len(both.output.strip().splitlines()) <= 2  # the error and its hint, orch's one-line style
