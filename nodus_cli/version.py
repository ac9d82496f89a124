"""nodus's version, in one place (``nodus --version``, the catalog fetcher's User-Agent,
``nodus_cli.__version__``); it matches ``version`` in pyproject.toml."""

__all__ = ["VERSION"]

VERSION = "0.1.0"
