"""The Docker plumbing both Docker targets share: the Engine API through the Docker SDK
(:mod:`.engine`, the one place its errors become nodus's) and the container a task
becomes (:mod:`.containers`).

The SDK is imported when the first engine connection is made, never by ``import
nodus_cli``, ``nodus --help``, ``validate`` or ``plan``.
"""
