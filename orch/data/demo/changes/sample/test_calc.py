"""The project's tests: `python3 -B test_calc.py` is the demo's check."""

from calc import clamp, mean  # type: ignore[import-not-found]  # (mypy sees orch, not this sample)

assert mean([1, 2, 3]) == 2
assert clamp(5, 0, 3) == 3
assert clamp(-1, 0, 3) == 0
print("ok")
