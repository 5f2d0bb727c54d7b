"""The strict base of every config model: unknown keys are errors, models are frozen, and each
field's docstring is its description (``dpgate config-reference``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
