"""The Docker plumbing both Docker targets share: the Engine API over the standard
library's HTTP client (:mod:`.http`, where every failure of a call becomes one of the
engine's errors; :mod:`.engine`, the calls), the container a task becomes
(:mod:`.containers`) and the images a run needs (:mod:`.images`).

None of it is imported by ``import nodus_cli``, ``nodus --help``, ``validate`` or ``plan``;
the Docker SDK only for the registry credentials of a Docker configuration that holds some.
"""
