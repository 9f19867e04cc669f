"""dpfed: distributed, multi-party, differentially private learning.

Layers, each importing only the ones below it (checked by ``tests/test_layers.py``):

1. ``dpfed.core``: randomness, exact samplers, mechanisms, clipping, accounting, the budget ledger;
2. ``dpfed.data``: schemas, data files, bundled datasets, splits;
3. ``dpfed.algorithms``: the party/coordinator contract, the registry, the algorithms and estimators;
4. ``dpfed.federation``: the party session, TLS and certificates, config helpers, plugin loading;
5. ``protos`` (wire format), then the daemons ``party`` and ``coordinator``;
6. ``dpfed.simulation``: in-process, Ray and local gRPC runners;
7. ``dpfed.cli``: the ``dpfed`` command.
"""
__version__ = "0.1.0"
