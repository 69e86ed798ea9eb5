"""The settings' parsers: a variable's text to its value; each raises ValueError saying what it wants."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def text(value: str) -> str:
    return value


def optional(value: str) -> str | None:
    return value or None


def path(value: str) -> Path:
    return Path(value).expanduser()


def optional_path(value: str) -> Path | None:
    return Path(value).expanduser() if value else None


def whole(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError("expected a whole number") from None


def at_least_one(value: str) -> int:
    number = whole(value)
    if number < 1:
        raise ValueError("expected a whole number, at least 1")
    return number


def seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError("expected a number of seconds") from None
    if not 0 < seconds <= 3600:
        raise ValueError("expected a number of seconds above 0, at most 3600")
    return seconds


def optional_whole(value: str) -> int | None:
    return whole(value) if value else None


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def flag(value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError("expected 1 or 0")


def optional_flag(value: str) -> bool | None:
    return flag(value) if value else None


def separated(separator: str) -> Callable[[str], list[str]]:
    def parse(value: str) -> list[str]:
        return [item.strip() for item in value.split(separator) if item.strip()]

    return parse
