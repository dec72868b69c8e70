"""Quantities as the API takes them: Kubernetes' grammar, 0 or more (found by `make mutation`)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from gpuwise.api.base import Quantity

QUANTITY: TypeAdapter[int | str] = TypeAdapter(Quantity)


@pytest.mark.parametrize("value", [0, 1, "0", "500m", "16Gi", "+1", ".5", "1e3"])
def test_amounts_of_zero_or_more_are_quantities(value: int | str) -> None:
    assert QUANTITY.validate_python(value) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "-1 is negative: an amount of a resource is 0 or more"),
        ("-1", "'-1' is negative: an amount of a resource is 0 or more"),
        ("-16Gi", "'-16Gi' is negative: an amount of a resource is 0 or more"),
        ("--1", "'--1' is not a Kubernetes quantity (examples: 1, 500m, 16Gi)"),
        ("+-1", "'+-1' is not a Kubernetes quantity (examples: 1, 500m, 16Gi)"),
        ("-lots", "'-lots' is not a Kubernetes quantity (examples: 1, 500m, 16Gi)"),
        ("16 GiB", "'16 GiB' is not a Kubernetes quantity (examples: 1, 500m, 16Gi)"),
    ],
)
def test_anything_else_is_refused_with_the_reason(value: int | str, message: str) -> None:
    with pytest.raises(ValidationError) as error:
        QUANTITY.validate_python(value)
    assert message in str(error.value)
