"""ORM queries compiled once per process, then run with new parameter values.

Django builds and compiles a queryset's SQL on every evaluation. For the few ``values_list``
queries every chat turn runs (pins and summaries, the memory index) that work costs more than
PostgreSQL takes to answer them: about 0.85 ms of Python per query, measured, against 0.3–0.5 ms
of SQL. ``CompiledValues`` keeps the ORM as the one place the query is written: the queryset is
built by a function of its parameters, compiled by Django once per database and shape, and
checked before it is trusted:

- It is compiled twice, with two different sets of stand-in values. The SQL must come out
  identical, and each parameter must appear only at its own placeholders, in both. A value that
  Django folds into the SQL text (a ``LIMIT``, a list expanded into ``IN (…)``, a ``None`` that
  becomes ``IS NULL``) fails this check with a ``TypeError`` at first use; declare such
  parameters as ``shape``: each distinct value then gets its own compilation.
- Django's converters for the selected columns (a boolean or a date on SQLite, an expression's
  declared output type) are taken from that compilation and applied to every row, as the ORM
  does: rows are plain tuples, exactly as ``values_list`` gives them.

Queries still go through Django's cursor (its error translation, ``CaptureQueriesContext``, the
debug log), on the connection of the calling thread.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import Model, QuerySet

# Stand-ins for bind parameters: two sets, far from any real id or seq, never sent to a database.
_INT_STANDINS = (1_900_000_001, 1_800_000_003)
_STR_STANDINS = ("\x00compiled-a-", "\x00compiled-b-")
_DATETIME_STANDINS = (
    datetime(1901, 2, 3, 4, 5, 6, 7, tzinfo=UTC),
    datetime(1902, 3, 4, 5, 6, 7, 8, tzinfo=UTC),
)
# The types a bind parameter may have: each gets stand-ins of its own type.
STANDIN_TYPES = (int, str, datetime)


def standins(binds: dict[str, Any]) -> list[dict[str, Any]]:
    """Two sets of stand-ins for ``binds`` (values of ``STANDIN_TYPES``, not bools), every value
    distinct within a set and from the other set's."""
    sides: list[dict[str, Any]] = [{}, {}]
    for index, (name, value) in enumerate(sorted(binds.items())):
        for side in (0, 1):
            if isinstance(value, str):
                sides[side][name] = _STR_STANDINS[side] + name
            elif isinstance(value, datetime):
                sides[side][name] = _DATETIME_STANDINS[side] + timedelta(minutes=index)
            else:
                sides[side][name] = _INT_STANDINS[side] + 10 * index
    return sides


def placeholders(
    name: str, params: tuple[Sequence[Any], Sequence[Any]], sides: list[dict[str, Any]]
) -> tuple[list[Any], list[tuple[int, str]]]:
    """The statement's parameters as built with each set of ``sides``: (constants with None where
    a bind goes, (position, bind name)). Raises ``TypeError`` when a bind is not a plain
    placeholder (folded into the SQL, changed on the way, or never reaching one)."""
    params_a, params_b = params
    by_standin = [{value: bind for bind, value in side.items()} for side in sides]
    constants: list[Any] = []
    positions: list[tuple[int, str]] = []
    for position, (a, b) in enumerate(zip(params_a, params_b, strict=True)):
        bind = by_standin[0].get(a) if isinstance(a, STANDIN_TYPES) else None
        if bind is not None and isinstance(b, STANDIN_TYPES) and by_standin[1].get(b) == bind:
            positions.append((position, bind))
            constants.append(None)
        elif a == b and bind is None:
            constants.append(a)
        else:
            raise TypeError(f"{name}: parameter {position} is not a plain placeholder")
    missing = set(sides[0]) - {bind for _, bind in positions}
    if missing:
        raise TypeError(f"{name}: {sorted(missing)} never reach a placeholder; declare as shape")
    return constants, positions


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple[Any, ...]  # constants, with None where a bind parameter goes
    binds: tuple[tuple[int, str], ...]  # (position, parameter name)
    # (column, (converters, expression)) as SQLCompiler.get_converters gives them
    converters: tuple[tuple[int, tuple[list[Callable[..., Any]], Any]], ...]


class CompiledValues:
    """A ``values_list`` queryset, built by ``build(**params)``, compiled once per database and
    shape. ``rows(**params)`` returns what ``list(build(**params))`` would.

    Bind parameters (ints and strs) are placeholders in the compiled SQL; ``shape`` parameters
    change the SQL itself (slices, optional filters) and key the compilations."""

    def __init__(
        self, build: Callable[..., QuerySet], *, shape: tuple[str, ...] = (), name: str = ""
    ) -> None:
        self._build = build
        self._shape = shape
        self._name = name or getattr(build, "__qualname__", "query")
        # (alias, shape values, bind names and types) -> compiled SQL
        self._compiled: dict[tuple[Any, ...], _Compiled] = {}

    def rows(self, *, using: str = "default", **params: Any) -> list[tuple[Any, ...]]:
        if not getattr(settings, "DB_FAST_PATHS", True):
            # The plain ORM (``DB_FAST_PATHS`` false): built and compiled on every call.
            return [tuple(row) for row in self._build(**params).using(using)]
        shape = {name: params[name] for name in self._shape}
        binds = {name: value for name, value in params.items() if name not in shape}
        for name, value in binds.items():
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise TypeError(
                    f"{self._name}: parameter {name!r} is {type(value).__name__}; bind "
                    "parameters are ints or strs, declare others as shape"
                )
        key = (
            using,
            tuple(sorted(shape.items())),
            tuple(sorted((name, type(value).__name__) for name, value in binds.items())),
        )
        if key not in self._compiled:
            # Compiling twice is harmless: two threads racing here store the same result.
            self._compiled[key] = self._compile(using, shape, binds)
        compiled = self._compiled[key]
        values = list(compiled.params)
        for position, name in compiled.binds:
            values[position] = binds[name]
        connection = connections[using]
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, values)
            rows = cursor.fetchall()
        if not compiled.converters:
            return [tuple(row) for row in rows]
        converted = []
        for row in rows:
            row = list(row)
            for position, (converters, expression) in compiled.converters:
                value = row[position]
                for converter in converters:
                    value = converter(value, expression, connection)
                row[position] = value
            converted.append(tuple(row))
        return converted

    def _compile(self, using: str, shape: dict[str, Any], binds: dict[str, Any]) -> _Compiled:
        sides = standins(binds)
        compiled = []
        converters: dict[int, tuple[list[Callable[..., Any]], Any]] = {}
        for side in (0, 1):
            queryset = self._build(**shape, **sides[side]).using(using)
            compiler = queryset.query.get_compiler(using=using)
            sql, params = compiler.as_sql()
            compiled.append((sql, tuple(params)))
            if side == 0:
                converters = compiler.get_converters([column for column, _, _ in compiler.select])
        (sql_a, params_a), (sql_b, params_b) = compiled
        if sql_a != sql_b or len(params_a) != len(params_b):
            raise TypeError(
                f"{self._name}: a bind parameter changes the SQL text; declare it as shape"
            )
        constants, positions = placeholders(self._name, (params_a, params_b), sides)
        return _Compiled(
            sql=sql_a,
            params=tuple(constants),
            binds=tuple(positions),
            converters=tuple(sorted(converters.items(), key=lambda item: item[0])),
        )


def model_fields(model: type[Model], prefix: str = "") -> tuple[str, ...]:
    """``values_list`` names of every concrete field of ``model`` (reached through ``prefix``,
    e.g. ``"bot__"``), in the order ``instances_from`` reads them back: a ``CompiledValues``
    read of whole rows, for the few model reads every request or turn makes."""
    return tuple(f"{prefix}{field.attname}" for field in model._meta.concrete_fields)


def instances_from(row: Sequence[Any], *models: type[Model], using: str = "default") -> list[Any]:
    """The instances of ``models`` (in order) from one row of their ``model_fields``, values
    already converted (``CompiledValues.rows``), as the ORM builds a queryset's instances."""
    if len(row) != sum(len(model._meta.concrete_fields) for model in models):
        raise TypeError(f"a row of {len(row)} values is not one of each of {models}")
    instances = []
    start = 0
    for model in models:
        fields = model._meta.concrete_fields
        names = [field.attname for field in fields]
        instances.append(model.from_db(using, names, list(row[start : start + len(fields)])))
        start += len(fields)
    return instances
