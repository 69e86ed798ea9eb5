"""A webhook receiver on loopback for every test of this package that asks for one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.notify.receiver import Receiver, serve


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from serve()
