"""Tiered storage: closed ledgers copied to an object store and read back (docs/tiered-storage.md).

Above storage (which does no network I/O and reads offloaded ledgers through the ``ObjectReader``
it is given) and below the broker (which decides when to offload): ``settings.py`` (the drivers'
settings), ``drivers.py`` (an obstore store per driver), ``object_io.py`` (range reads, uploads,
deletes), ``offloader.py`` (``LedgerOffloader``: a ledger copied, verified, recorded).
"""
