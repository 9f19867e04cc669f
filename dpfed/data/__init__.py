"""Layer 2, data: public schemas, file loading and validation, the bundled datasets and splits.

Imports only :mod:`dpfed.core`; the bundled ``.npz`` datasets live in this folder.
"""
