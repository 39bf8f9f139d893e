"""``UPDATE … RETURNING`` for the hot paths: a conditional write and the fresh row in one round
trip.

Django's ``QuerySet.update()`` returns a row count, so code that needs the row it just changed
reads it again (a second round trip, and a second query to build). On a chat turn that pattern sat
on the path to the first token and after the last one (reserving seqs, then reading them back;
finishing a reply, then reading it back for its frame). PostgreSQL and SQLite (3.35+) both take
``RETURNING``, so the update's own statement, compiled by Django from the queryset, brings the
rows back as model instances.
"""

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import IntegrityError, connections, transaction
from django.db.models import Model, QuerySet
from django.db.models.sql import UpdateQuery

from chat_platform.compiled import STANDIN_TYPES, instances_from, placeholders, standins
from chat_platform.errors import ValidationFailed

M = TypeVar("M", bound=Model)


def update_returning(queryset: QuerySet[M], **values: Any) -> list[M]:
    """``queryset.update(**values)``, returning the updated rows (fresh, every concrete field).

    Like ``update()``: one statement, no signals, ``F()`` expressions allowed; rows the filter no
    longer matches (a conditional update that lost its race) are simply not returned. Updates that
    would touch a parent model's table (multi-table inheritance) are refused.
    """
    if not fast_paths():
        return _update_then_read(queryset, **values)
    compiled = update_returning_sql(queryset, **values)
    if compiled is None:
        return []
    return raw_rows(queryset, *compiled)


def fast_paths() -> bool:
    """Whether the hand-written fast paths run (``DB_FAST_PATHS``, default true); false: the
    plain ORM, same results, more round trips."""
    return bool(getattr(settings, "DB_FAST_PATHS", True))


def _update_then_read(queryset: QuerySet[M], **values: Any) -> list[M]:
    """The plain-ORM ``update_returning``: lock the rows the filter matches, update exactly
    those (the filter still holds: they are locked), read them back."""
    model = queryset.model
    with transaction.atomic(using=queryset.db):
        pks = list(queryset.select_for_update().values_list("pk", flat=True))
        if not pks:
            return []
        queryset.filter(pk__in=pks).update(**values)
        return list(
            model._default_manager.db_manager(queryset.db).filter(pk__in=pks).order_by("pk")
        )


def update_returning_sql(queryset: QuerySet[Any], **values: Any) -> tuple[str, tuple] | None:
    """The statement ``update_returning`` runs, for composing it (as a PostgreSQL CTE); None when
    the filter can match nothing (``pk__in=[]``)."""
    if queryset.query.is_sliced:
        raise TypeError("Cannot update a query once a slice has been taken.")
    model = queryset.model
    query = queryset.query.chain(UpdateQuery)
    query.add_update_values(values)
    if query.related_updates:
        raise ValueError("update_returning cannot update fields of a parent model.")
    query.clear_select_clause()
    try:
        sql, params = query.get_compiler(queryset.db).as_sql()
    except EmptyResultSet:
        return None
    quote = connections[queryset.db].ops.quote_name
    columns = ", ".join(quote(field.column) for field in model._meta.concrete_fields)
    return f"{sql} RETURNING {columns}", tuple(params)


class CompiledStatement:
    """A hand-composed statement, ``build(**binds) -> (sql, params)``, built once per database
    and then run with new values (chat_platform/compiled.py does the same for ``values_list``
    queries): Django's query building cost more CPU than the statement (the claim's: ~0.45 ms a
    turn). It is built twice with two sets of stand-ins; the SQL must come out the same and each
    bind must be found only where its stand-in is, else ``build`` runs on every call."""

    def __init__(self, build: Callable[..., tuple[str, Sequence[Any]]], *, name: str) -> None:
        self._build = build
        self._name = name
        # alias -> (sql, constant params, (position, bind name)) or None: not compilable
        self._compiled: dict[str, tuple[str, list[Any], list[tuple[int, str]]] | None] = {}

    def statement(self, *, using: str = "default", **binds: Any) -> tuple[str, list[Any]]:
        if using not in self._compiled:
            self._compiled[using] = self._compile(binds)
        compiled = self._compiled[using]
        if compiled is None:
            sql, params = self._build(**binds)
            return sql, list(params)
        sql, constants, positions = compiled
        params = list(constants)
        for position, name in positions:
            params[position] = binds[name]
        return sql, params

    def _compile(
        self, binds: dict[str, Any]
    ) -> tuple[str, list[Any], list[tuple[int, str]]] | None:
        if any(
            isinstance(value, bool) or not isinstance(value, STANDIN_TYPES)
            for value in binds.values()
        ):
            return None
        sides = standins(binds)
        (sql_a, params_a), (sql_b, params_b) = (self._build(**side) for side in sides)
        if sql_a != sql_b or len(params_a) != len(params_b):
            return None
        try:
            constants, positions = placeholders(self._name, (params_a, params_b), sides)
        except TypeError:  # a bind folded or changed on the way: built on every call
            return None
        return sql_a, constants, positions


def raw_rows(queryset: QuerySet[M], sql: str, params: tuple) -> list[M]:
    """Run ``sql`` (which returns whole rows of the queryset's model, its concrete fields in
    order, as ``update_returning_sql``'s ``RETURNING``) as model instances, converted as the ORM
    converts (``instance_from_row``). Not through ``Manager.raw``: its RawQuerySet matched the
    columns by name and resolved their converters on every call, ~0.2 ms of CPU a turn's finish
    (docs/performance.md "A turn's CPU, sixth pass")."""
    using = queryset.db
    with (
        transaction.mark_for_rollback_on_error(using=using),
        connections[using].cursor() as cursor,
    ):
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [instance_from_row(queryset.model, row, using=using) for row in rows]


def select_columns(model: type[Model], alias: str, *, using: str = "default") -> str:
    """``alias."column", …`` for every concrete field of ``model``, in ``concrete_fields`` order:
    what ``instance_from_row`` reads back."""
    quote = connections[using].ops.quote_name
    return ", ".join(f"{quote(alias)}.{quote(f.column)}" for f in model._meta.concrete_fields)


@lru_cache(maxsize=64)
def _row_converters(model: type[Model], using: str) -> tuple[tuple[Any, list[Any]], ...]:
    connection = connections[using]
    table = model._meta.db_table
    converters = []
    for field in model._meta.concrete_fields:
        column = field.get_col(table)
        converters.append(
            (
                column,
                connection.ops.get_db_converters(column) + column.get_db_converters(connection),
            )
        )
    return tuple(converters)


def instance_from_row(model: type[M], values: Sequence[Any], *, using: str = "default") -> M:
    """A model instance from the columns ``select_columns`` selected, converted as the ORM
    converts a queryset's rows (JSON decoded, booleans and dates on SQLite)."""
    connection = connections[using]
    converted = []
    for value, (column, converters) in zip(values, _row_converters(model, using), strict=True):
        for converter in converters:
            value = converter(value, column, connection)
        converted.append(value)
    return instances_from(converted, model, using=using)[0]


# Rows per statement of ``rows_update``.
ROWS_UPDATE_BATCH = 500


def rows_update(model: type[Model], objs: Sequence[Model], fields: Sequence[str]) -> None:
    """``model.objects.bulk_update(objs, fields)`` as one ``UPDATE … FROM (VALUES …)`` per
    ``ROWS_UPDATE_BATCH`` rows: each row's ``fields`` set to what its instance holds, prepared
    for the database as ``bulk_update`` prepares them, without building and resolving a
    ``CASE WHEN pk = … THEN …`` per row and field in Python (6 rows of three fields: 5-6 ms of
    CPU that way, 0.4-0.5 ms this way). No signals, like ``bulk_update``. PostgreSQL types the
    VALUES columns from casts to each field's column type; SQLite (3.33+) stores the prepared
    values as they are."""
    if not objs:
        return
    connection = connections[model._default_manager.db]
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    pk_field = model._meta.pk
    assert pk_field is not None
    targets = [pk_field, *(model._meta.get_field(name) for name in fields)]
    if connection.vendor == "postgresql":
        row = ", ".join(f"CAST(%s AS {field.db_type(connection)})" for field in targets)
    else:
        row = ", ".join(["%s"] * len(targets))
    assigned = ", ".join(
        f"{quote(field.column)} = v.column{n}"  # type: ignore[attr-defined]
        for n, field in enumerate(targets[1:], start=2)
    )
    with connection.cursor() as cursor:
        for start in range(0, len(objs), ROWS_UPDATE_BATCH):
            batch = objs[start : start + ROWS_UPDATE_BATCH]
            cursor.execute(
                f"UPDATE {table} SET {assigned} FROM (VALUES "  # noqa: S608
                f"{', '.join([f'({row})'] * len(batch))}) AS v "
                f"WHERE {table}.{quote(pk_field.column)} = v.column1",
                [
                    field.get_db_prep_save(  # type: ignore[attr-defined]
                        getattr(obj, field.attname),
                        connection,  # type: ignore[attr-defined]
                    )
                    for obj in batch
                    for field in targets
                ],
            )


def saved_unless_taken(instance: Model, *, field: str, message: str = "") -> None:
    """Save ``instance``. A value of its unique ``field`` that another request took between the
    caller's check and this write (two staff saving one name at once) is the check's
    ``validation_error`` on ``field`` (``message``, else the model's own words), not a 500."""
    try:
        with transaction.atomic():
            instance.save()
    except IntegrityError:
        model = type(instance)
        others = model._default_manager.filter(**{field: getattr(instance, field)})
        if not others.exclude(pk=instance.pk).exists():
            raise
        words = [message] if message else list(instance.unique_error_message(model, (field,)))
        raise ValidationFailed(details={field: words}) from None
