"""The one root of dpfed's exceptions: ``except DpfedError`` catches every error dpfed raises on purpose.

Each subclass also keeps the built-in base it always had (``ValueError`` for bad input,
``RuntimeError`` for a failed operation), so existing ``except ValueError`` code keeps working.

| class | where | meaning |
|---|---|---|
| :class:`dpfed.core.accounting.AccountingError` | core | an event an accountant cannot compose |
| :class:`dpfed.core.ledger.BudgetExceededError` | core | a charge would exceed the ledger's limit |
| :class:`dpfed.core.ledger.LedgerError` | core | the ledger's database is unusable |
| :class:`dpfed.data.schema.DataValidationError` | data | records or a schema break the declared schema |
| :class:`dpfed.core.errors.TaskRejected` | core, algorithms | a party refuses a job or task (with a reason) |
| :class:`dpfed.federation.config.ConfigError` | federation | a configuration file is missing or wrong |
| :class:`dpfed.federation.secagg.SecAggError` | federation | secure aggregation failed (key, envelope, survivors) |
| :class:`protos.codec.ProtocolError` | protos | a malformed message on the wire |
| :class:`coordinator.client.JobError` | coordinator | a job failed, was refused or cancelled |
| :class:`dpfed.simulation.grpc_local.SimulationError` | simulation | a simulated party failed or the job stalled |
"""
from __future__ import annotations

__all__ = ["DpfedError", "TaskRejected"]


class DpfedError(Exception):
    """Base class of every exception dpfed raises deliberately."""


class TaskRejected(DpfedError, ValueError):
    """A party refuses a job or task: outside the charged plan, wrong schema, bad parameters."""
