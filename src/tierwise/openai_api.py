"""The OpenAI API's request schema and error shape, shared by the gateway and the stand-in.

What ``POST /v1/chat/completions`` and ``POST /v1/completions`` accept, as pydantic
models in strict mode: every field OpenAI documents is typed (``max_tokens`` an integer
≥ 1 and never ``true``, ``temperature`` a number in [0, 2], ``messages`` a non-empty
array of role-tagged messages whose ``content`` is a string or an array of parts, …).
Fields it does not know are kept and passed on: OpenAI-compatible servers take
vendor fields (llama.cpp's ``cache_prompt``, vLLM's ``top_k``), and a gateway in
front of them must not drop them. Two deliberate differences from OpenAI: ``model``
may be left out (llama.cpp and vLLM serve their one model), and a content part of a
type OpenAI does not know (``video_url``, …) passes if it names its ``type``.

:func:`parse_request` turns a body into a checked dict (one JSON parse, its nesting
bounded before the parser sees it); every refusal is a :class:`RequestRejected`
whose :meth:`~RequestRejected.body` is OpenAI's error object::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
               "code": "integer_below_min_value"}}
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    ValidationError,
)

from tierwise.errors import TierwiseError, clip

__all__ = [
    "CHAT_PATH",
    "COMPLETIONS_PATH",
    "MAX_DEPTH",
    "ChatCompletionRequest",
    "CompletionRequest",
    "RequestRejected",
    "error_body",
    "json_depth",
    "parse_request",
]

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
MAX_DEPTH = 64  # JSON nesting: a chat request is ~6 deep, a tool's JSON Schema a few more

Number = StrictInt | StrictFloat  # strict float also takes an integer; never a bool
Count = Annotated[StrictInt, Field(ge=1)]


class _Open(BaseModel):
    """Strict types for the fields we know; unknown fields kept (vendor extensions)."""

    model_config = ConfigDict(strict=True, extra="allow")


class TextPart(_Open):
    type: Literal["text"]
    text: StrictStr


class ImageURL(_Open):
    url: StrictStr
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(_Open):
    type: Literal["image_url"]
    image_url: ImageURL


class InputAudio(_Open):
    data: StrictStr
    format: StrictStr


class AudioPart(_Open):
    type: Literal["input_audio"]
    input_audio: InputAudio


class FilePart(_Open):
    type: Literal["file"]
    file: dict[str, Any]


class RefusalPart(_Open):
    type: Literal["refusal"]
    refusal: StrictStr


class OtherPart(_Open):
    """A vendor's part (``video_url``, ``input_image``…): it must say its type."""

    type: StrictStr


_KNOWN_PARTS = {"text", "image_url", "input_audio", "file", "refusal"}


def _part_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if kind in _KNOWN_PARTS else "other"


Part = Annotated[
    Annotated[TextPart, Tag("text")]
    | Annotated[ImagePart, Tag("image_url")]
    | Annotated[AudioPart, Tag("input_audio")]
    | Annotated[FilePart, Tag("file")]
    | Annotated[RefusalPart, Tag("refusal")]
    | Annotated[OtherPart, Tag("other")],
    Discriminator(_part_tag),
]
Content = StrictStr | Annotated[list[Part], Field(min_length=1)]


class FunctionCall(_Open):
    name: StrictStr
    arguments: StrictStr


class ToolCall(_Open):
    id: StrictStr
    type: Literal["function"]
    function: FunctionCall


class _Said(_Open):
    """A system, developer or user message: its content is required."""

    content: Content
    name: StrictStr | None = None


class SystemMessage(_Said):
    role: Literal["system"]


class DeveloperMessage(_Said):
    role: Literal["developer"]


class UserMessage(_Said):
    role: Literal["user"]


class AssistantMessage(_Open):
    role: Literal["assistant"]
    content: Content | None = None  # none when it calls tools
    name: StrictStr | None = None
    refusal: StrictStr | None = None
    tool_calls: list[ToolCall] | None = None


class ToolMessage(_Open):
    role: Literal["tool"]
    content: Content
    tool_call_id: StrictStr


class FunctionMessage(_Open):
    role: Literal["function"]
    content: StrictStr | None
    name: StrictStr


Message = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage
    | FunctionMessage,
    Field(discriminator="role"),
]  # fmt: skip


class FunctionDef(_Open):
    name: Annotated[StrictStr, Field(min_length=1, max_length=64)]
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class Tool(_Open):
    type: Literal["function"]
    function: FunctionDef


class NamedTool(_Open):
    type: Literal["function"]
    function: dict[str, Any]


class StreamOptions(_Open):
    include_usage: StrictBool | None = None


class ResponseFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]


Stop = StrictStr | Annotated[list[StrictStr], Field(max_length=4)] | None


class _Sampling(_Open):
    """Fields both endpoints share."""

    model: StrictStr | None = None
    max_tokens: Count | None = None
    n: Annotated[StrictInt, Field(ge=1, le=128)] | None = None
    temperature: Annotated[Number, Field(ge=0, le=2)] | None = None
    top_p: Annotated[Number, Field(ge=0, le=1)] | None = None
    presence_penalty: Annotated[Number, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[Number, Field(ge=-2, le=2)] | None = None
    stream: StrictBool | None = None
    stream_options: StreamOptions | None = None
    stop: Stop = None
    seed: StrictInt | None = None
    logit_bias: dict[str, Annotated[Number, Field(ge=-100, le=100)]] | None = None
    user: StrictStr | None = None


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: Count | None = None
    logprobs: StrictBool | None = None
    top_logprobs: Annotated[StrictInt, Field(ge=0, le=20)] | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedTool | None = None
    parallel_tool_calls: StrictBool | None = None
    response_format: ResponseFormat | None = None


Prompt = (
    StrictStr
    | list[StrictStr]
    | Annotated[list[StrictInt], Field(min_length=1)]
    | list[Annotated[list[StrictInt], Field(min_length=1)]]
)


class CompletionRequest(_Sampling):
    """``POST /v1/completions``."""

    prompt: Prompt
    suffix: StrictStr | None = None
    echo: StrictBool | None = None
    best_of: Annotated[StrictInt, Field(ge=1, le=20)] | None = None
    logprobs: Annotated[StrictInt, Field(ge=0, le=5)] | None = None


SCHEMAS: dict[str, type[_Open]] = {
    CHAT_PATH: ChatCompletionRequest,
    COMPLETIONS_PATH: CompletionRequest,
}


class RequestRejected(TierwiseError, ValueError):
    """A request refused at the edge: its HTTP status and OpenAI's error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = (
            status, message, param, code, kind,
        )  # fmt: skip
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.kind, self.param, self.code)


def error_body(
    message: str, kind: str = "invalid_request_error", param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(body: bytes, limit: int = MAX_DEPTH) -> int:
    """How deep ``body``'s arrays and objects nest, counted without parsing (a bracket
    inside a string does not count); stops counting past ``limit``. The common body
    has fewer brackets than ``limit`` and costs two ``bytes.count``; only one with more
    is scanned (strings cut out by a regex, then the brackets walked)."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return min(body.count(b"[") + body.count(b"{"), limit)
    brackets = _STRINGS.sub(b"", body).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for byte in brackets:
        depth += 1 if byte in b"[{" else -1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                break
    return deepest


def parse_json(body: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``body`` as JSON: UTF-8, nested at most ``max_depth`` deep, no NaN or Infinity."""
    if json_depth(body, max_depth) > max_depth:
        raise RequestRejected(
            400, f"We could not parse the JSON body of your request: it nests deeper than "
            f"{max_depth} levels.", code="json_too_deep",
        )  # fmt: skip
    try:
        return _DECODER.decode(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RequestRejected(
            400, f"We could not parse the JSON body of your request: it is not UTF-8 "
            f"(byte {exc.start}).", code="invalid_json",
        ) from None  # fmt: skip
    except (ValueError, RecursionError) as exc:
        raise RequestRejected(
            400, "We could not parse the JSON body of your request. (HINT: This likely means "
            f"you aren't using your HTTP library correctly: {clip(str(exc), 120)})",
            code="invalid_json",
        ) from None  # fmt: skip


def parse_request(path: str, body: bytes, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """The body of a request to ``path`` (chat or completions) parsed once and checked
    against the schema; the dict is what was sent (unknown fields included)."""
    data = parse_json(body, max_depth)
    if not isinstance(data, dict):
        raise RequestRejected(
            400, f"The request body must be a JSON object, got {_kind_of(data)}.",
            code="invalid_type",
        )  # fmt: skip
    validate(path, data)
    return data


def validate(path: str, data: dict[str, Any]) -> None:
    """Check ``data`` against the schema of ``path``; a refusal names the field."""
    try:
        SCHEMAS[path].model_validate(data)
    except ValidationError as exc:
        raise _rejection(exc, data) from None


# ------------------------------------------------------------------ error messages

_EXPECTED = {
    "string_type": "a string", "int_type": "an integer", "float_type": "a number",
    "bool_type": "a boolean", "list_type": "an array", "dict_type": "an object",
    "model_type": "an object", "model_attributes_type": "an object",
    "int_from_float": "an integer", "none_required": "null",
}  # fmt: skip


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "an integer" if isinstance(value, int) else "a number"
    return {str: "a string", list: "an array", dict: "an object"}.get(type(value), "a value")


def _walk(loc: tuple[Any, ...], data: Any) -> tuple[str, Any]:
    """The parameter named by a pydantic location (union branch labels skipped), as
    OpenAI writes it (``messages[0].content``), and the value there."""
    param, at = "", data
    for i, key in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(at, dict) and isinstance(key, str) and key in at:
            param, at = f"{param}.{key}" if param else key, at[key]
        elif isinstance(at, list) and isinstance(key, int) and 0 <= key < len(at):
            param, at = f"{param}[{key}]", at[key]
        elif isinstance(at, dict) and isinstance(key, str) and last:
            return (f"{param}.{key}" if param else key), _MISSING
        # else: a union's branch label (``str``, ``list[...]``, a tag such as ``user``),
        # which names no part of the value
    return param, at


_MISSING = object()


def _depth(param: str) -> int:
    return param.count(".") + param.count("[") + bool(param)


def _rejection(exc: ValidationError, data: dict[str, Any]) -> RequestRejected:
    errors = exc.errors(include_url=False, include_context=True, include_input=False)
    walked = [(_walk(e["loc"], data), e) for e in errors]
    # a union's branches each fail: the one that got deepest into the value says most
    (param, value), first = max(walked, key=lambda w: _depth(w[0][0]))
    same = [e for (p, _), e in walked if p == param]
    kinds = [e["type"] for e in same]
    shown = clip(repr(value), 60) if value is not _MISSING else ""
    if first["type"] == "missing" or value is _MISSING:
        return RequestRejected(
            400, f"Missing required parameter: '{param}'.", param=param,
            code="missing_required_parameter",
        )  # fmt: skip
    expected = [_EXPECTED[k] for k in kinds if k in _EXPECTED]
    if expected and len(expected) == len(kinds):
        wanted = " or ".join(dict.fromkeys(expected))
        return RequestRejected(
            400, f"Invalid type for '{param}': expected {wanted}, but got "
            f"{_kind_of(value)} instead.", param=param, code="invalid_type",
        )  # fmt: skip
    bound = next((e for e in same if e["type"] in _BOUNDS), None)
    if bound is not None:
        op, side = _BOUNDS[bound["type"]]
        ctx = bound.get("ctx", {})
        limit = ctx.get("min_length", ctx.get("max_length", next(iter(ctx.values()), "?")))
        edge = "minimum" if side == "below" else "maximum"
        if "length" in op:
            what, code = f"array {side} {edge} length", f"array_{side}_{edge[:3]}_length"
            op = op.removeprefix("of length ")
            code = "empty_array" if value == [] else code
        else:
            noun = "integer" if isinstance(value, int) else "decimal"
            what, code = f"{noun} {side} {edge} value", f"{noun}_{side}_{edge[:3]}_value"
        return RequestRejected(
            400, f"Invalid '{param}': {what}. Expected a value {op} {limit}, but got "
            f"{shown} instead.", param=param, code=code,
        )  # fmt: skip
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):  # a message's role
        key = first.get("ctx", {}).get("discriminator", "").strip("'")
        param = f"{param}.{key}" if param else key
        if first["type"] == "union_tag_not_found":
            return RequestRejected(
                400, f"Missing required parameter: '{param}'.", param=param,
                code="missing_required_parameter",
            )  # fmt: skip
        shown = clip(repr(first["ctx"].get("tag")), 60)
    if first["type"] in ("literal_error", "union_tag_invalid", "enum"):
        ctx = first.get("ctx", {})
        allowed = ctx.get("expected", ctx.get("expected_tags", ""))
        return RequestRejected(
            400, f"Invalid value for '{param}': {shown}. Supported values are: {allowed}.",
            param=param, code="invalid_value",
        )  # fmt: skip
    return RequestRejected(
        400, f"Invalid '{param}': {first['msg']}.", param=param, code="invalid_value"
    )


_BOUNDS = {
    "greater_than_equal": (">=", "below"),
    "greater_than": (">", "below"),
    "less_than_equal": ("<=", "above"),
    "less_than": ("<", "above"),
    "too_short": ("of length >=", "below"),
    "too_long": ("of length <=", "above"),
}
