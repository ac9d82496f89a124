"""What hardware is, independent of who sells it: GPU model families (:mod:`.gpus`), the
GPUs an image's CUDA version can drive (:mod:`.cuda`), locations (:mod:`.locations`), and
the GPUs this machine's driver reports (:mod:`.smi`, read by the local target and by the
Swarm node setup alike: hardware, not a target).

The first three read a data table shipped in ``nodus_cli/data/`` (``gpus.json``,
``cuda.json``, ``locations.json``): the tables are data, the modules only the rules that
read them. Only the foundation and the configuration lie below.
"""
