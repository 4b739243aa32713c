"""JSON values as the adapter reads them: strict parsing (no NaN or
Infinity, no crash on deep nesting) and the numeric checks every module
shares. Booleans are never numbers here, though Python's `bool` is an `int`.
"""

import json
import math

MAX_U64 = 2**64 - 1


class NotJson(ValueError):
    pass


def loads(text):
    """The JSON value of `text`; raises `NotJson` with the reason."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise NotJson("nested too deeply") from None
    except ValueError as e:
        raise NotJson(str(e)) from None


def is_integer(value, lo=0, hi=MAX_U64):
    """An integer (not a bool) in [lo, hi]."""
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def is_number(value):
    """A finite number (not a bool) that fits a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def show(value):
    """A submitted value as an error message quotes it: compact JSON, cut."""
    return cut(json.dumps(value, separators=(",", ":"), ensure_ascii=False), 80)


def cut(text, max_bytes):
    """`text` cut to at most `max_bytes` of UTF-8, marked with an ellipsis."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode(errors="ignore") + "…"


def _refuse_constant(name):
    raise ValueError(f"{name} is not a JSON value")
