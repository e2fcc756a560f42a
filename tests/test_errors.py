"""`errors.flag_problem`: a validation problem named by the flag the user typed."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field, ValidationError, model_validator

from entmtp_vllm.errors import flag_problem


class _Options(BaseModel):
    max_tokens: int = Field(1, ge=1)
    threads: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _fits(self) -> "_Options":
        if self.threads > 8:
            raise ValueError("too many threads")
        return self


def _error(**values) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        _Options(**values)
    return caught.value


def test_the_field_becomes_its_flag():
    field, flag, message = flag_problem(_error(max_tokens=0))
    assert (field, flag) == ("max_tokens", "--max-tokens") and "greater than or equal to 1" in message


def test_a_flag_of_another_name_and_a_problem_of_the_whole_model():
    assert flag_problem(_error(threads=0), {"threads": "--server-threads"})[:2] == ("threads", "--server-threads")
    field, flag, message = flag_problem(_error(threads=9))
    assert (field, flag) == ("config", "--config") and "too many threads" in message
