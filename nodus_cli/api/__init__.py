"""The Python API: :class:`~nodus_cli.api.client.Client` and the handles it returns.

Everything a program (and the command line, which is one) can do with nodus goes
through here: load and check workloads, plan them, run them, look at runs and spending.
The public names are re-exported by ``nodus_cli`` itself (its ``__all__``); import them
from there. Modules below this layer are internal and may change between releases.
"""
