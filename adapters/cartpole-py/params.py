"""Validation of a cartpole task's parameters.

`task.params` is whatever the submitter sent; `parse` turns it into a dict
with every default filled in (the trainer's `params.json`), or raises
`ParamsError` naming the offending key and the values it accepts. Unknown
keys are refused, and no key names a file. The keys, bounds, defaults and
messages are those of the Rust `cartpole` adapter.
"""

from values import MAX_U64, NotJson, cut, is_integer, is_number, loads, show

MAX_EPISODES = 20_000
MAX_HIDDEN = 256
MAX_EVAL_WINDOW = 1_000

#: The trainer's keys, in the order operators read them, with their defaults.
DEFAULTS = {
    "episodes": 300,
    "learning_rate": 0.01,
    "gamma": 0.99,
    "hidden": 32,
    "seed": 0,
    "checkpoint_every": 50,
    "eval_window": 20,
}
ACCEPTED_KEYS = tuple(DEFAULTS)


class ParamsError(Exception):
    """Params no retry can fix: the same params fail the same way anywhere."""

    def __init__(self, detail):
        super().__init__(f"invalid params: {detail}")


def parse(text):
    """The params of `text` (a JSON object) with defaults filled in."""
    fields = object_with_keys(text, ACCEPTED_KEYS)
    return {
        "episodes": integer(fields, "episodes", 1, MAX_EPISODES),
        "learning_rate": fraction(fields, "learning_rate", open_at_zero=True),
        "gamma": fraction(fields, "gamma", open_at_zero=False),
        "hidden": integer(fields, "hidden", 1, MAX_HIDDEN),
        "seed": integer(fields, "seed", 0, None),
        "checkpoint_every": integer(fields, "checkpoint_every", 1, None),
        "eval_window": integer(fields, "eval_window", 1, MAX_EVAL_WINDOW),
    }


def object_with_keys(text, accepted):
    """The JSON object of `text`, refusing any key not in `accepted`."""
    try:
        value = loads(text)
    except NotJson as e:
        raise ParamsError(f"not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ParamsError(f"expected a JSON object, got {show(value)}")
    for key in value:
        if key not in accepted:
            raise ParamsError(
                f'unknown key "{cut(key, 64)}"; accepted keys are {", ".join(accepted)}'
            )
    return value


def integer(fields, key, lo, hi):
    """An integer in [lo, hi] (no upper bound when `hi` is None)."""
    if key not in fields:
        return DEFAULTS[key]
    value = fields[key]
    if is_integer(value, lo, MAX_U64 if hi is None else hi):
        return value
    expected = f"an integer of at least {lo}" if hi is None else f"an integer from {lo} to {hi}"
    raise ParamsError(f'"{key}" must be {expected}, got {show(value)}')


def fraction(fields, key, open_at_zero):
    """A number in (0, 1] when `open_at_zero`, else in [0, 1]."""
    if key not in fields:
        return DEFAULTS[key]
    value = fields[key]
    if is_number(value):
        above_floor = value > 0 if open_at_zero else value >= 0
        if above_floor and value <= 1:
            return float(value)
    interval = "(0, 1]" if open_at_zero else "[0, 1]"
    raise ParamsError(f'"{key}" must be a number in {interval}, got {show(value)}')
