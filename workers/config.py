"""A study's configuration: its schema, defaults and validation with researcher-readable errors.

Loaded from YAML or JSON (CLI ``create``) or from a dict (API); stored as JSON in the
study hash. Must never import Flask or the engine.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jsonschema
import yaml

ALGORITHMS = ("random",)
QUESTION_KINDS = ("triplet",)

DEFAULT_INSTRUCTIONS = (
    "You will see one item on top and two items below it. Click the one of the two that is "
    "more similar to the item on top (or press the ← / → key). There are no right or wrong "
    "answers: go with your first impression."
)

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 200},
        "algorithm": {"enum": list(ALGORITHMS)},
        "question_kind": {"enum": list(QUESTION_KINDS)},
        "instructions": {"type": "string", "maxLength": 20000},
        "question": {"type": "string", "minLength": 1, "maxLength": 500},
        "pool_size": {"type": "integer", "minimum": 1, "maximum": 10000},
        "token_ttl_seconds": {"type": "integer", "minimum": 10, "maximum": 7 * 24 * 3600},
        "random_state": {"type": ["integer", "null"], "minimum": 0},
    },
}


class ConfigError(ValueError):
    """A study config that cannot be used; the message names the field and what is allowed."""


@dataclass(frozen=True)
class StudyConfig:
    name: str
    algorithm: str = "random"
    question_kind: str = "triplet"
    instructions: str = DEFAULT_INSTRUCTIONS
    question: str = "Which of these two is more similar to the one on top?"
    pool_size: int = 50
    token_ttl_seconds: int = 900
    random_state: int | None = None
    extra: dict = field(default_factory=dict, compare=False)

    @classmethod
    def from_dict(cls, data) -> StudyConfig:
        if not isinstance(data, dict):
            raise ConfigError("a study config must be a mapping of fields (e.g. name: My study)")
        validator = jsonschema.Draft202012Validator(SCHEMA)
        errors = sorted(validator.iter_errors(data), key=lambda e: list(e.path))
        if errors:
            raise ConfigError("; ".join(_describe(e) for e in errors))
        return cls(**data)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("extra")
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def _describe(error: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in error.path) or "config"
    if error.validator == "additionalProperties":
        allowed = ", ".join(sorted(SCHEMA["properties"]))
        unknown = ", ".join(sorted(set(error.instance) - set(SCHEMA["properties"])))
        return f"unknown field(s) {unknown}; allowed fields are: {allowed}"
    if error.validator == "required":
        return f"config: {error.message}"
    if error.validator == "enum":
        allowed = ", ".join(map(str, error.validator_value))
        return f"field '{where}' is {error.instance!r}; allowed values: {allowed}"
    if error.validator == "type":
        return f"field '{where}' must be of type {error.validator_value}, got {error.instance!r}"
    return f"field '{where}': {error.message}"


def load_config_file(path: str | Path) -> StudyConfig:
    """Read a YAML or JSON config file; raises ConfigError naming the file on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path} is not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from None
    try:
        return StudyConfig.from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
