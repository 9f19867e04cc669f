"""dpfed: distributed, multi-party, differentially private learning.

The ``dpfed`` package holds the math only (randomness, mechanisms, accounting, the budget ledger,
the algorithms and the CLI); it opens no socket. The party daemon lives in ``party``, the
coordinator in ``coordinator``, the wire format in ``protos``.
"""
__version__ = "0.1.0"
