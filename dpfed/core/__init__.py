"""Layer 1, the privacy core: randomness, exact samplers, mechanisms, clipping, accounting, the ledger.

Imports nothing from the rest of dpfed, neither grpc nor ray.
"""
