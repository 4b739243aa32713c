"""What the __NAME__ adapter decides, as plain Python: its params, their
schema, reading the trainer's lines and its result. Nothing here imports
the contract's bindings, so `make test` runs these functions with plain
python3 (test_logic.py), offline; `app.py` wraps them for the host.
"""

import json

#: The params a task may give: default and bounds. The one place they are
#: written: `parse_params` checks them, `params_schema` describes them.
PARAMS = {
    "episodes": {"default": 20, "minimum": 1, "maximum": 10_000},
    "seed": {"default": 0, "minimum": 0, "maximum": 2**32 - 1},
}

#: The metrics `result_metrics` reads from the trainer's result.json.
RESULT_METRICS = ["best_return", "episodes"]


def params_schema():
    """The params as a JSON Schema: the master refuses a submission that
    fails it (naming the field) before any host sees it."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            key: {"type": "integer", "minimum": p["minimum"], "maximum": p["maximum"]}
            for key, p in PARAMS.items()
        },
    }


def parse_params(text):
    """The task's params with defaults filled in; raises ValueError."""
    try:
        given = json.loads(text)
    except ValueError as e:
        raise ValueError(f"invalid params: not valid JSON ({e})") from None
    if not isinstance(given, dict):
        raise ValueError("invalid params: expected a JSON object")
    unknown = sorted(set(given) - set(PARAMS))
    if unknown:
        raise ValueError(f'invalid params: unknown key "{unknown[0]}"; accepted keys are '
                         + ", ".join(PARAMS))
    params = {key: p["default"] for key, p in PARAMS.items()}
    params.update(given)
    for key, p in PARAMS.items():
        value, lo, hi = params[key], p["minimum"], p["maximum"]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f'invalid params: "{key}" must be an integer from {lo} to {hi}, '
                             f"got {json.dumps(value)}")
    return params


def progress_fields(line):
    """(episode, total, return) from one line of the trainer, or None: the
    trainer's output is untrusted, so anything but a well-formed episode
    line is no progress, and nothing here raises."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("type") != "episode":
        return None
    episode, total, ret = record.get("episode"), record.get("episodes"), record.get("return")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (episode, total)):
        return None
    if isinstance(ret, bool) or not isinstance(ret, (int, float)):
        return None
    return episode, total, float(ret)


def result_metrics(text):
    """The metrics in the trainer's result.json (its numbers), sorted by
    name; raises ValueError if it is not a JSON object."""
    fields = json.loads(text)
    if not isinstance(fields, dict):
        raise ValueError("expected a JSON object")
    return [(k, float(v)) for k, v in sorted(fields.items())
            if isinstance(v, (int, float)) and not isinstance(v, bool)]
