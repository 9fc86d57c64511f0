"""The native ``string_to_properties`` (the send path's) agrees with the pure-Python
reference on any text, and refuses what is not text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hanet.protocol import native_string_to_properties, string_to_properties_py

needs_native = pytest.mark.skipif(
    native_string_to_properties is None, reason="hanet.protocol._speedups is not built"
)


@needs_native
@given(st.text(alphabet=st.sampled_from(["a", "B", "\x01", "\x02", "é", "中", "😀", " "])))
def test_any_text_parses_as_the_reference(text: str) -> None:
    assert native_string_to_properties is not None
    assert native_string_to_properties(text) == string_to_properties_py(text)
    assert list(native_string_to_properties(text)) == list(string_to_properties_py(text))


@needs_native
@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02WAIT\x01true\x02",
        "TAGS\x01a",
        "\x01no name\x02no separator\x02a\x01\x01b\x02a\x01last",
    ],
)
def test_the_send_path_cases(text: str | None) -> None:
    assert native_string_to_properties is not None
    assert native_string_to_properties(text) == string_to_properties_py(text)


@needs_native
def test_not_text_is_refused() -> None:
    assert native_string_to_properties is not None
    with pytest.raises(TypeError):
        native_string_to_properties(b"a\x01b")  # type: ignore[arg-type]
