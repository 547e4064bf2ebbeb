"""File helpers shared by instances, profiles and solutions: YAML/JSON reading with errors that
name the file and line, pydantic error translation, hashing and atomic writes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from llmopt.errors import InputFileError, LlmoptError, OptionError

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SAFE_NAME_RULE = ("must be a safe file name: letters, digits, '.', '_', '-', starting with a "
                  "letter or digit, at most 128 characters")

# libyaml's safe loader when PyYAML was built with it (about 7x faster), else PyYAML's own
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def is_safe_name(name: str) -> bool:
    return SAFE_NAME.fullmatch(name) is not None


def out_path(folder: Path, *parts: str) -> Path:
    """``folder/part/...`` for input-derived names, refused unless each part is a safe file name
    and the path resolves inside ``folder``."""
    path = folder.joinpath(*parts)
    unsafe = next((p for p in parts if not is_safe_name(p)), None)
    if unsafe is not None or not path.resolve().is_relative_to(folder.resolve()):
        raise OptionError("would write outside the output folder", field="--out",
                          value=str(path))
    return path


def read_text(path: Path, what: str = "file") -> str:
    if not path.exists():
        raise InputFileError(f"{what} not found", file=path)
    if path.is_dir():
        article = "an" if what[:1] in "aeiou" else "a"
        raise InputFileError(f"expected {article} {what}, found a directory", file=path)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"cannot read {what}: {exc}", file=path) from exc


def load_yaml_mapping(path: Path, what: str = "YAML file") -> dict[str, Any]:
    """Read a YAML file whose top level must be a mapping."""
    text = read_text(path, what)
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown line"
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputFileError(f"YAML syntax error at {where}: {problem}", file=path) from exc
    except yaml.YAMLError as exc:
        raise InputFileError(f"YAML syntax error: {exc}", file=path) from exc
    if data is None:
        raise InputFileError(f"{what} is empty", file=path)
    if not isinstance(data, dict):
        raise InputFileError(
            f"top level must be a mapping of fields, found {type(data).__name__}", file=path
        )
    return data


def load_json_mapping(path: Path, what: str = "JSON file") -> dict[str, Any]:
    text = read_text(path, what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(
            f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}", file=path
        ) from exc
    if not isinstance(data, dict):
        raise InputFileError("top level must be a JSON object", file=path)
    return data


def field_path(loc: tuple[Any, ...], prefix: str = "") -> str:
    """Render a pydantic error location as ``requests[3].input_tokens``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and not part.startswith("function-"):
            out = f"{out}.{part}" if out else part
    return out


def validated(
    model: type[BaseModel],
    data: Any,
    *,
    file: str | Path | None,
    prefix: str = "",
    error: type[LlmoptError] = LlmoptError,
) -> Any:
    """Validate ``data`` against a pydantic model, raising ``error`` for the first problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        loc = tuple(p for p in first["loc"] if not _is_union_tag(p))
        msg = first["msg"]
        if first["type"] == "missing":
            # a misspelt key: the unknown key beside the missing one is the mistake to name
            typo = next((e for e in errors if e["type"] == "extra_forbidden"
                         and e["loc"][:-1] == first["loc"][:-1]), None)
            if typo is not None:
                typo_loc = tuple(p for p in typo["loc"] if not _is_union_tag(p))
                raise error(f"unknown field (did you mean {str(loc[-1])!r}?)", file=file,
                            field=field_path(typo_loc, prefix)) from None
            raise error("required field is missing", file=file,
                        field=field_path(loc, prefix)) from None
        if first["type"] == "extra_forbidden":
            raise error(
                "unknown field", file=file, field=field_path(loc, prefix)
            ) from None
        value = first.get("input")
        msg = msg.removeprefix("Value error, ")
        raise error(msg, file=file, field=field_path(loc, prefix), value=value,
                    has_value=True) from None


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and (part.startswith(("tagged-union", "function-")))


def sha256_of(obj: Any) -> str:
    """Content hash of a JSON-serialisable object (canonical: sorted keys, no spaces)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write a file so that readers see either the old or the new content, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sidecar_name(json_path: Path) -> str:
    """The name of the Parquet file beside a solution JSON that holds its schedule."""
    return json_path.with_suffix(".schedule.parquet").name
