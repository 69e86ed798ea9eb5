"""Model prices: the shipped table (orch/data/pricing.json) or the user's (ORCH_PRICING, boot.pricing).

USD per million tokens for input, output, cache writes and cache reads; a model takes the price of the
longest prefix of its name in the table. A model with no price costs 0 (the server notes it once).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from orch.errors import UsageError
from orch.gateway.modeldir import Tokens
from orch.run.records import Strict
from orch.settings.user import PRICING
from orch.text import first_error

SHIPPED = "orch/data/pricing.json"


class Price(Strict):
    input: float
    output: float
    cache_write: float
    cache_read: float


class PricingTable(Strict):
    unit: str = "USD per million tokens"
    source: str = ""
    models: dict[str, Price]


class Pricing:
    def __init__(self, table: PricingTable, origin: str) -> None:
        self.table, self.origin = table, origin
        self._prefixes = sorted(table.models, key=len, reverse=True)

    def price(self, model: str) -> Price | None:
        prefix = next((p for p in self._prefixes if model.startswith(p)), None)
        return None if prefix is None else self.table.models[prefix]

    def cost(self, model: str, tokens: Tokens) -> float | None:
        """USD for `tokens` of `model`; None if the table has no price for it."""
        price = self.price(model)
        if price is None:
            return None
        return (
            tokens.input_tokens * price.input
            + tokens.output_tokens * price.output
            + tokens.cache_creation_input_tokens * price.cache_write
            + tokens.cache_read_input_tokens * price.cache_read
        ) / 1_000_000


def load_pricing(override: str | None = None) -> Pricing:
    """The boot's file, else ORCH_PRICING's, else the shipped table; a bad file is a one-line UsageError."""
    path = Path(override).expanduser() if override else PRICING.get()
    if path is None:
        text = resources.files("orch").joinpath("data/pricing.json").read_text()
        return Pricing(PricingTable.model_validate_json(text), SHIPPED)
    try:
        return Pricing(PricingTable.model_validate_json(path.read_text()), str(path))
    except OSError as exc:
        raise UsageError(f"cannot read pricing file {path}: {exc.strerror}") from None
    except ValidationError as exc:
        raise UsageError(
            f"pricing file {path} is malformed: {first_error(exc, 'the file')}",
            hint='{"models": {"claude-sonnet-4": {"input": 3, "output": 15, "cache_write": 3.75, "cache_read": 0.3}}}',
        ) from None
