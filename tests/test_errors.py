"""The DOCA error table: complete against doca_error_t, names agree with DOCA."""
from __future__ import annotations

import pytest

from pydoca._native import ffi, lib
from pydoca.errors import ERRORS, NAMES, ClosedError, DocaError, check, error_for


def _codes() -> dict[str, int]:
    return dict(ffi.typeof("doca_error_t").relements)


def test_every_doca_error_has_a_subclass() -> None:
    codes = _codes()
    assert codes.pop("DOCA_SUCCESS") == 0
    assert codes, "doca_error_t has no error values"
    for name, code in codes.items():
        cls = ERRORS.get(code)
        assert cls is not None, f"no pydoca.errors class for {name}={code}"
        assert issubclass(cls, DocaError)
        assert cls.code == code
        assert cls.name == name
        assert NAMES[code] == name
    assert set(ERRORS) == set(codes.values()), "ERRORS has codes doca_error_t does not define"


@pytest.mark.parametrize("code", sorted(v for v in dict(ffi.typeof("doca_error_t").relements).values()))
def test_doca_error_get_name_agrees(code: int) -> None:
    name = ffi.string(lib.doca_error_get_name(code)).decode()
    assert name == NAMES[code]
    descr = lib.doca_error_get_descr(code)
    assert descr != ffi.NULL and ffi.string(descr)


def test_check_success_is_silent() -> None:
    check(0)
    check(lib.DOCA_SUCCESS, "nothing")


@pytest.mark.parametrize("code", sorted(ERRORS))
def test_check_raises_the_subclass(code: int) -> None:
    with pytest.raises(ERRORS[code]) as info:
        check(code, "doing something")
    exc = info.value
    assert type(exc) is ERRORS[code]
    assert exc.code == code
    assert exc.name == ERRORS[code].name
    assert isinstance(exc.description, str) and exc.description
    assert "doing something" in str(exc) and exc.name in str(exc)


def test_unknown_code_is_plain_docaerror() -> None:
    exc = error_for(4242, "odd")
    assert type(exc) is DocaError
    assert exc.code == 4242


def test_closed_error_is_value_error() -> None:
    assert issubclass(ClosedError, DocaError) and issubclass(ClosedError, ValueError)
