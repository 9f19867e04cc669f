"""Layer 4, federation: the party session (decide, charge, check, answer once), the driver loop's
transports, TLS and certificates, configuration helpers and algorithm plugin loading.

Imports :mod:`dpfed.core`, :mod:`dpfed.data` and :mod:`dpfed.algorithms`; may import grpc
(TLS credentials), never the daemons (``party``, ``coordinator``) or the wire format (``protos``).
"""
