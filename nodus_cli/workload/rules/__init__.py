"""The workload rules, one module per subject of the file.

A user reads a workload file by subject, and a rule is looked for the same way: what is
wrong with my mounts? So each module holds the rules of one subject, whatever its size:

- :mod:`.keys`: which keys stand where (the top level, ``[requirements]``, a stage, its
  requirements, ``[map]``), with the fix for a misplaced, misspelt or foreign key;
- :mod:`.values`: what every value shares (a string, an image reference, a quantity);
- :mod:`.requirements` and :mod:`.gpu`: what a level needs from a machine, and the GPU
  model, whose name has the most ways to be written wrong;
- :mod:`.command`: what the container runs (``command``, ``entrypoint``, ``env``);
- :mod:`.paths`, :mod:`.mounts`, :mod:`.ports`: what it reaches on the host;
- :mod:`.fanout`: ``[map]``, one task per input;
- :mod:`.stages`: ``[[stages]]`` and what a stage inherits from the top level.

The modules are composed, not layered into classes: each is a set of functions that take
the document's :class:`~nodus_cli.workload.report.ProblemReport` first, read one table, report at
the key paths they are given, and return normalized values (None for a wrong one). None
keeps state between calls, so the order the caller applies them is the order problems on
one line are shown. :mod:`nodus_cli.workload.normalizer` applies them to the top level of
the file, :mod:`.stages` to each stage. The imports between them form no circle:
``values``, ``keys``, ``gpu`` and ``ports`` use no other rule module, ``stages`` uses most.
"""
