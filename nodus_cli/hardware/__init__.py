"""What hardware is, independent of who sells it: GPU model families (:mod:`.gpus`), the
GPUs an image's CUDA version can drive (:mod:`.cuda`), and locations (:mod:`.locations`).

Each reads a data table shipped in ``nodus_cli/data/`` (``gpus.json``, ``cuda.json``,
``locations.json``): the tables are data, the modules only the rules that read them.
Only the foundation (:mod:`nodus_cli.errors`, :mod:`nodus_cli.text`) lies below.
"""
