"""The ``tidelog`` PySpark data source: Spark's Kafka connector options and schema, in pure Python.

Invariants:

- ``DataSource.name()`` is ``"tidelog"``; a session knows it after :func:`tidelog.spark.register`.
- Options are parsed when Spark asks for a reader or writer, so a bad option fails the query at plan
  time with an :class:`~tidelog.spark.options.OptionError` naming it.
- The schema is fixed (Spark's Kafka source row); a user-given schema is refused.
- ``deliveryGuarantee=exactly-once`` (streaming writes only) is checked at plan time: the broker must hand
  out a transactional producer id, else :class:`~tidelog.spark.exactly_once.ExactlyOnceUnavailableError`;
  open transactions a killed run of the query left are fenced then (:mod:`tidelog.spark.fencing`). It
  commits in two phases (:mod:`tidelog.spark.two_phase`: the query's leftovers are resolved then) when the
  broker allows it and ``twoPhaseCommit`` is not ``false``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
)
from pyspark.sql.types import StructType

from tidelog.spark.fencing import checkpoint_query_id, fence_leftovers
from tidelog.spark.options import OptionError, parse_reader_options, parse_writer_options
from tidelog.spark.reader import BatchReader, StreamReader
from tidelog.spark.schema import arrow_schema, ddl
from tidelog.spark.transactional import (
    TransactionalStreamWriter,
    ensure_progress_topic,
    probe_transactions,
    read_batch_shape,
)
from tidelog.spark.two_phase import TwoPhaseStreamWriter, choose_two_phase, latest_logged_batch, recover
from tidelog.spark.writer import BatchWriter, StreamWriter, check_input_schema

__all__ = ["TidelogDataSource"]

log = logging.getLogger("tidelog.spark")


def _warn(warnings: Iterable[str]) -> None:
    for warning in warnings:
        log.warning("%s", warning)


class TidelogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tidelog"

    def _include_headers(self) -> bool:
        raw = {str(k).lower(): str(v) for k, v in self.options.items()}.get("includeheaders", "false")
        return raw.strip().lower() == "true"

    def schema(self) -> str:
        return ddl(self._include_headers())

    def _check_schema(self, schema: StructType) -> None:
        expected = arrow_schema(self._include_headers()).names
        if schema.fieldNames() != expected:
            raise OptionError(
                f"the tidelog source has a fixed schema ({', '.join(expected)}); do not pass .schema(...)"
            )

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        options = parse_reader_options(self.options, streaming=False)
        _warn(options.warnings)
        return BatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_schema(schema)
        options = parse_reader_options(self.options, streaming=True)
        _warn(options.warnings)
        return StreamReader(options)  # it warns once per query run when maxOffsetsPerTrigger is unset

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        if overwrite:
            raise OptionError("the tidelog sink only appends (save mode append), like Spark's Kafka sink")
        options = parse_writer_options(self.options)
        _warn(options.warnings)
        if options.exactly_once:
            raise OptionError(
                "deliveryGuarantee=exactly-once is for streaming writes (writeStream): a batch write has no "
                "micro-batch id that would make a retried task's transaction idempotent"
            )
        check_input_schema(schema, options)
        return BatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        options = parse_writer_options(self.options)
        _warn(options.warnings)
        check_input_schema(schema, options)
        if options.exactly_once:
            probe_transactions(options)
            ensure_progress_topic(options)
            if choose_two_phase(options):
                query_id = checkpoint_query_id(options.checkpoint_location)
                running = latest_logged_batch(options.checkpoint_location)
                decided = None if query_id is None else recover(options, query_id, running)
                return TwoPhaseStreamWriter(options, query_id, decided)
            # Spark builds the writer when the query (re)starts and again for each commit / abort, always
            # with no task of the query writing: transactions a killed run left open are fenced here.
            query_id = checkpoint_query_id(options.checkpoint_location)
            if query_id is not None:
                fence_leftovers(options, query_id)
            shape = None if query_id is None else read_batch_shape(options, query_id)
            return TransactionalStreamWriter(options, fenced_query=query_id, shape=shape)
        return StreamWriter(options)
