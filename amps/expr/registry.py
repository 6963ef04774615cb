"""Every function the language knows: arity, category (what it may read) and implementation.

Categories decide where a function may appear (AMPS-EXPRESSIONS.md §6.10, §7): a queue Filter,
Priority or BarrierExpression accepts only PURE, MESSAGE and INSTANCE functions.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from amps.expr import fn_number, fn_text, fn_time
from amps.expr.message import EvalContext, Message
from amps.expr.values import Value


class Category(enum.Enum):
    PURE = "pure"  # a function of its arguments only
    MESSAGE = "message"  # reads the message's headers (topic, bookmark, size...)
    INSTANCE = "instance"  # reads this instance's name or group
    QUEUE_STATE = "queue state"  # reads lease bookkeeping that exists only once a message is queued
    CLIENT = "client"  # reads the connected client behind the operation
    NONDETERMINISTIC = "non-deterministic"  # may differ between two evaluations (the clock)


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    name: str
    min_args: int
    max_args: int | None  # None: any number
    category: Category
    # PURE: called with the argument values. Others: called with (message, context).
    impl: Callable[..., Value]
    takes_pattern: bool = False  # REGEXP_*: the compiled second argument is passed first


def _text_or_null(text: str) -> Value:
    return text or None


def _message_size(msg: Message, _ctx: EvalContext) -> Value:
    return msg.size_bytes()


def _correlation_id(msg: Message, _ctx: EvalContext) -> Value:
    return _text_or_null(msg.correlation_id)


def _topic_name(msg: Message, _ctx: EvalContext) -> Value:
    return _text_or_null(msg.topic)


def _bookmark(msg: Message, _ctx: EvalContext) -> Value:
    return _text_or_null(msg.bookmark)


def _lease_count(msg: Message, _ctx: EvalContext) -> Value:
    return None if msg.lease_count is None else float(msg.lease_count)


def _last_leased(msg: Message, _ctx: EvalContext) -> Value:
    return None if msg.last_leased_us is None else msg.last_leased_us / 1_000_000


def _client_name(_msg: Message, ctx: EvalContext) -> Value:
    return _text_or_null(ctx.client_name)


def _user(_msg: Message, ctx: EvalContext) -> Value:
    return _text_or_null(ctx.user_id)


def _instance_name(_msg: Message, ctx: EvalContext) -> Value:
    return _text_or_null(ctx.instance_name)


def _group_name(_msg: Message, ctx: EvalContext) -> Value:
    return _text_or_null(ctx.group_name)


def _unix_timestamp(_msg: Message, ctx: EvalContext) -> Value:
    return ctx.now_us / 1_000_000


def _build() -> dict[str, FunctionSpec]:
    pure = Category.PURE
    table: list[FunctionSpec] = [
        FunctionSpec("INSTR", 2, 2, pure, fn_text.instr),
        FunctionSpec("INSTR_I", 2, 2, pure, fn_text.instr_i),
        FunctionSpec("STREQUAL_I", 2, 2, pure, fn_text.strequal_i),
        FunctionSpec("LENGTH", 1, 1, pure, fn_text.length),
        FunctionSpec("CONCAT", 1, None, pure, fn_text.concat),
        FunctionSpec("UPPER", 1, 1, pure, fn_text.upper),
        FunctionSpec("LOWER", 1, 1, pure, fn_text.lower),
        FunctionSpec("REPLACE", 3, 3, pure, fn_text.replace),
        FunctionSpec("REGEXP_REPLACE", 3, 3, pure, fn_text.regexp_replace, takes_pattern=True),
        FunctionSpec("REGEXP_MATCH", 2, 2, pure, fn_text.regexp_match, takes_pattern=True),
        FunctionSpec("SUBSTR", 2, 3, pure, fn_text.substr),
        FunctionSpec("LEFT", 2, 2, pure, fn_text.left),
        FunctionSpec("RIGHT", 2, 2, pure, fn_text.right),
        FunctionSpec("TRIM", 1, 2, pure, fn_text.trim),
        FunctionSpec("LTRIM", 1, 2, pure, fn_text.ltrim),
        FunctionSpec("RTRIM", 1, 2, pure, fn_text.rtrim),
        FunctionSpec("REVERSE", 1, 1, pure, fn_text.reverse),
        FunctionSpec("COALESCE", 1, None, pure, fn_text.coalesce),
        FunctionSpec("CHAR_VALUE", 1, 1, pure, fn_text.char_value),
        FunctionSpec("MD5", 1, 1, pure, fn_text.md5),
        FunctionSpec("TRUE_VALUE", 0, 0, pure, fn_text.true_value),
        FunctionSpec("FALSE_VALUE", 0, 0, pure, fn_text.false_value),
        FunctionSpec("NAN_VALUE", 0, 0, pure, fn_text.nan_value),
        FunctionSpec("ABS", 1, 1, pure, fn_number.absolute),
        FunctionSpec("SIGN", 1, 1, pure, fn_number.sign),
        FunctionSpec("CEILING", 1, 1, pure, fn_number.ceiling),
        FunctionSpec("FLOOR", 1, 1, pure, fn_number.floor),
        FunctionSpec("ROUND", 1, 2, pure, fn_number.round_half_away),
        FunctionSpec("GREATEST", 1, None, pure, fn_number.greatest),
        FunctionSpec("LEAST", 1, None, pure, fn_number.least),
        FunctionSpec("WIDTH_BUCKET", 4, 4, pure, fn_number.width_bucket),
        FunctionSpec("ARRAY_COUNT", 1, 1, pure, fn_number.array_count),
        FunctionSpec("ARRAY_MAX", 1, 1, pure, fn_number.array_max),
        FunctionSpec("ARRAY_MIN", 1, 1, pure, fn_number.array_min),
        FunctionSpec("ARRAY_SUM", 1, 1, pure, fn_number.array_sum),
        FunctionSpec("ARRAY_TO_STRING", 3, 3, pure, fn_number.array_to_string),
        FunctionSpec("CRC32", 1, 1, pure, fn_number.crc32),
        FunctionSpec("CRC64", 1, 1, pure, fn_number.crc64),
        FunctionSpec("STRFTIME", 2, 2, pure, fn_time.strftime),
        FunctionSpec("STRPTIME", 2, 2, pure, fn_time.strptime),
        FunctionSpec("MESSAGE_SIZE", 0, 0, Category.MESSAGE, _message_size),
        FunctionSpec("CORRELATION_ID", 0, 0, Category.MESSAGE, _correlation_id),
        FunctionSpec("TOPIC_NAME", 0, 0, Category.MESSAGE, _topic_name),
        FunctionSpec("BOOKMARK", 0, 0, Category.MESSAGE, _bookmark),
        FunctionSpec("AMPS_INSTANCE_NAME", 0, 0, Category.INSTANCE, _instance_name),
        FunctionSpec("AMPS_GROUP_NAME", 0, 0, Category.INSTANCE, _group_name),
        FunctionSpec("LEASE_COUNT", 0, 0, Category.QUEUE_STATE, _lease_count),
        FunctionSpec("LAST_LEASED", 0, 0, Category.QUEUE_STATE, _last_leased),
        FunctionSpec("CLIENT_NAME", 0, 0, Category.CLIENT, _client_name),
        FunctionSpec("USER", 0, 0, Category.CLIENT, _user),
        FunctionSpec("UNIX_TIMESTAMP", 0, 0, Category.NONDETERMINISTIC, _unix_timestamp),
    ]
    for name, (arity, fn) in fn_number.FLOAT_FUNCTIONS.items():
        table.append(FunctionSpec(name, arity, arity, pure, fn_number.float_function(fn)))
    return {spec.name: spec for spec in table}


FUNCTIONS: dict[str, FunctionSpec] = _build()
