"""The command line: the Typer app (:mod:`.app`), one module per command
(:mod:`.commands`) and the terminal rendering (:mod:`.output`, :mod:`.display`).

The top layer. A command parses its options, calls the Python API
(:class:`nodus_cli.api.client.Client`), and renders what it returns; it never reaches
into the records, the targets or the run driver itself, and no command imports another.
Errors are raised, never printed here: ``nodus_cli.__main__`` prints them.
"""
