"""nodus: validate, price and run GPU workloads described in TOML files."""

__version__ = "0.1.0"
