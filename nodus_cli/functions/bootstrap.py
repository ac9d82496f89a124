# mypy: ignore-errors
"""nodus's runtime inside a container: it calls a Python function and writes its outcome.

nodus imports it only for the warm-worker protocol's names (below): this file is shipped
into containers (mounted read-only on the local target, carried as a Swarm config on
Swarm) beside a copy of the caller's own cloudpickle package, and run by the image's
Python::

    python3 -u bootstrap.py CALL_DIR ITEM            # one call
    python3 -u bootstrap.py --worker CALL_DIR NAME   # a warm worker: many calls
    python3 -u bootstrap.py --unpack PARTS CALL_DIR ITEM LIMIT  # Swarm, Kubernetes: unpack()

The call folder (written by ``nodus_cli.functions``)::

    CALL_DIR/function.pickle      one JSON line (the header), then the pickled function
    CALL_DIR/items/ITEM/args.pickle     the pickled (args, kwargs) of one call
    CALL_DIR/items/ITEM/outcome.json    written here, always last
    CALL_DIR/items/ITEM/result.pickle   the return value (status ok)
    CALL_DIR/items/ITEM/exception.pickle    the exception, when it pickles and loads again

The header is read and checked before anything is unpickled: pickled code runs only on
the Python ``major.minor`` that pickled it (another version fails with a TypeError, or
a segfault), so a mismatch is an outcome that names both versions. For the same reason
this file must parse on any Python 3 it may meet: no f-strings, no walrus, no ``match``.

``outcome.json`` is the truth, not the exit code: a function that calls ``os._exit(0)``
exits 0 without one. The exit codes (0 ok, 101 raised, 102 another Python, 103 the
payload cannot be read, 104 the result cannot be written, 105 this runtime failed) stay
clear of 1, 2, 125-127 and 128+N, and are a hint only. ``sys.exit(code)`` in the function
ends the call as it would end a program: 0 (or None) is a success whose value is None;
any other code is the call's exit code (status ``exited``; 1 for a message or a
number outside 1-255).

A warm worker talks with its caller over two FIFOs, ``CALL_DIR/workers/NAME/requests``
(the caller writes, the runtime reads) and ``replies`` (the runtime writes, the caller
reads), in the warm-worker protocol: the messages below, versioned by :data:`PROTOCOL`.
Each call's stdout and stderr go to ``items/ITEM/stdout`` and ``stderr``. The worker ends
when the caller closes the requests (or is gone). The caller learns that the container
ended from the engine, never through these FIFOs: each has one writer.

The protocol is this file's (the caller imports its names): every message is one JSON
object on one line, its kind under ``"kind"`` (:func:`encode`, :func:`decode`):

=========  ========  =======  ===================  =====================================
channel    writer    kind     fields               meaning
=========  ========  =======  ===================  =====================================
replies    runtime   hello    protocol             first and once: the version it speaks;
                                                   a caller of another refuses the worker
requests   caller    call     item, env, call      run ITEM's call, with env set for it;
                                                   CALL (optional): the call's folder is
                                                   CALL_DIR/CALL (a warm worker of single
                                                   calls), else CALL_DIR itself (a map)
replies    runtime   done     item, code           ITEM's call ended with exit CODE; its
                                                   outcome.json is written
=========  ========  =======  ===================  =====================================

A new kind or field, or another meaning for one, is a new :data:`PROTOCOL`.
"""

import json
import os
import pickle
import sys
import time

FORMAT = 1
HEADER_LIMIT = 64 * 1024

EXIT_OK = 0
EXIT_RAISED = 101
EXIT_VERSION = 102
EXIT_PAYLOAD = 103
EXIT_RESULT = 104
EXIT_RUNTIME = 105

HERE = os.path.dirname(os.path.abspath(__file__))
#: Swarm: a result travels back through the service's log, in frames of base64 lines.
FRAME = "\x1enodus-frame"
#: Base64 characters per frame line: under the 16 KB at which engines split log lines.
FRAME_LINE = 12 * 1024


def _version(info):
    return ".".join(str(part) for part in info)


def _here():
    return {
        "python": list(sys.version_info[:2]),
        "python_full": _version(sys.version_info[:3]),
        "executable": sys.executable,
    }


def _write_atomic(path, write):
    """write(binary file) into a temporary name beside path, then rename it to path."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as handle:
            write(handle)
        getattr(os, "replace", os.rename)(tmp, path)  # a Python 2 still reports
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_json(path, doc):
    data = (json.dumps(doc, sort_keys=True) + "\n").encode("utf-8")
    _write_atomic(path, lambda handle: handle.write(data))


def _cloudpickle():
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import cloudpickle

    return cloudpickle


def _type_of(obj):
    cls = type(obj)
    return {
        "module": getattr(cls, "__module__", None),
        "qualname": getattr(cls, "__qualname__", cls.__name__),
    }


def _traceback(exc, skip=0):
    import traceback

    tb = exc.__traceback__
    for _ in range(skip):  # this runtime's own frames
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


class _Refused(Exception):
    """The call cannot be made: (status, exit code, outcome fields)."""

    def __init__(self, status, code, fields):
        Exception.__init__(self, status)
        self.status = status
        self.code = code
        self.fields = fields


def read_header(handle):
    line = handle.readline(HEADER_LIMIT + 1)
    if not line.endswith(b"\n"):
        raise ValueError("no header line (or one over %d bytes)" % HEADER_LIMIT)
    header = json.loads(line.decode("utf-8"))
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError("format %r; this runtime reads format %d" % (header, FORMAT))
    return header


def load_function(path, cache):
    """The function at path and the pickle protocol to answer with; checked first."""
    if path in cache:
        return cache[path]
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise _Refused(
            "payload_error", EXIT_PAYLOAD, {"message": "cannot open %s: %s" % (path, exc)}
        )
    with handle:
        try:
            header = read_header(handle)
        except ValueError as exc:
            raise _Refused(
                "payload_error", EXIT_PAYLOAD, {"message": "cannot read the header: %s" % exc}
            )
        needed = tuple(header.get("python") or ())
        if needed != tuple(sys.version_info[:2]):
            raise _Refused(
                "version_mismatch",
                EXIT_VERSION,
                {
                    "python_needed": _version(needed),
                    "caller_python": header.get("python_full") or _version(needed),
                    "message": "the function was pickled by Python %s, and this image runs "
                    "Python %s (%s)"
                    % (
                        header.get("python_full") or _version(needed),
                        _version(sys.version_info[:3]),
                        sys.executable,
                    ),
                },
            )
        protocol = int(header.get("result_protocol", pickle.DEFAULT_PROTOCOL))
        if protocol > pickle.HIGHEST_PROTOCOL:
            raise _Refused(
                "payload_error",
                EXIT_PAYLOAD,
                {
                    "message": "pickle protocol %d asked for; this Python writes at most %d"
                    % (protocol, pickle.HIGHEST_PROTOCOL)
                },
            )
        if HERE not in sys.path:  # a pickled function names cloudpickle, beside this file
            sys.path.insert(0, HERE)
        try:
            fn = pickle.load(handle)
        except Exception as exc:
            raise _Refused("payload_error", EXIT_PAYLOAD, _unpickling(exc, "the function"))
    cache[path] = (fn, protocol)
    return cache[path]


def _unpickling(exc, what):
    message = "cannot unpickle %s: %s: %s" % (what, type(exc).__name__, exc)
    name = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    fields = {"message": message, "traceback": _traceback(exc)}
    if name:
        fields["missing_module"] = name
    return fields


def run_call(function_path, item_dir, cache):
    """One call: item_dir/outcome.json (and result or exception); returns the exit code."""
    started = time.time()

    def finish(status, code, fields):
        fields.update(_here())
        fields["status"] = status
        fields["exit_code"] = code
        fields["seconds"] = round(time.time() - started, 6)
        _write_json(os.path.join(item_dir, "outcome.json"), fields)
        return code

    try:
        fn, protocol = load_function(function_path, cache)
    except _Refused as refused:
        return finish(refused.status, refused.code, refused.fields)
    try:
        with open(os.path.join(item_dir, "args.pickle"), "rb") as handle:
            args, kwargs = pickle.load(handle)
    except Exception as exc:
        return finish("payload_error", EXIT_PAYLOAD, _unpickling(exc, "the arguments"))

    try:
        result = fn(*args, **kwargs)
    except SystemExit as exc:  # as it would end a program: 0 (or None) is a success
        del args, kwargs
        if exc.code is not None and exc.code != 0:
            return finish(*_exited(exc))
        result = None
    except BaseException as exc:  # reported, never a silent exit
        del args, kwargs
        return finish(*_raised(exc, protocol, item_dir))
    else:
        del args, kwargs

    path = os.path.join(item_dir, "result.pickle")
    try:
        cloudpickle = _cloudpickle()
        _write_atomic(path, lambda handle: cloudpickle.dump(result, handle, protocol=protocol))
    except OSError as exc:
        return finish(
            "result_error",
            EXIT_RESULT,
            {
                "message": "the return value could not be written: %s: %s"
                % (type(exc).__name__, exc)
            },
        )
    except Exception as exc:
        return finish(
            "result_error",
            EXIT_RESULT,
            {
                "message": "the return value cannot be pickled: %s: %s" % (type(exc).__name__, exc),
                "type": _type_of(result),
            },
        )
    return finish(
        "ok",
        EXIT_OK,
        {
            "result": "result.pickle",
            "type": _type_of(result),
            "result_bytes": os.path.getsize(path),
        },
    )


def _exited(exc):
    """sys.exit(code) with a code that is not 0: that exit code (1 for a message, which is
    printed to stderr as Python does, and for a number that is no exit status)."""
    code = exc.code
    number = int(code) if isinstance(code, int) and 0 < code <= 255 else 1
    if not isinstance(code, int):
        sys.stderr.write("%s\n" % (code,))
    fields = {
        "type": _type_of(exc),
        "message": str(exc),
        "traceback": _traceback(exc, skip=1),
        "code": code if isinstance(code, (int, str)) else repr(code),
    }
    return "exited", number, fields


def _raised(exc, protocol, item_dir):
    fields = {
        "type": _type_of(exc),
        "message": str(exc),
        "traceback": _traceback(exc, skip=1),
        "exception_pickle": None,
    }
    # A module the image lacks, imported by the function's own code (not a name missing
    # from a module it has: that ImportError is no ModuleNotFoundError).
    name = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if name:
        fields["missing_module"] = name
    try:
        data = _cloudpickle().dumps(exc, protocol=protocol)
        # An exception whose __init__ takes other arguments than .args pickles and then
        # fails to load: try it here, where its class exists.
        pickle.loads(data)
    except Exception as err:
        fields["exception_pickle_error"] = "%s: %s" % (type(err).__name__, err)
    else:
        _write_atomic(os.path.join(item_dir, "exception.pickle"), lambda h: h.write(data))
        fields["exception_pickle"] = "exception.pickle"
    return "raised", EXIT_RAISED, fields


# -- a warm worker ---------------------------------------------------------------------

#: The warm-worker protocol's version (the table in this module's docstring).
PROTOCOL = 2
#: The field that holds a message's kind, and the kinds.
KIND = "kind"
HELLO = "hello"
CALL = "call"
DONE = "done"


def encode(kind, **fields):
    # type: (str, **object) -> bytes
    """One message of the warm-worker protocol: a JSON object on one line."""
    fields[KIND] = kind
    return (json.dumps(fields, sort_keys=True) + "\n").encode("utf-8")


def decode(line):
    # type: (bytes) -> dict
    """A message read back; ValueError for a line that is none."""
    try:
        message = json.loads(line.decode("utf-8"))
    except ValueError:
        message = None
    if not isinstance(message, dict) or not isinstance(message.get(KIND), str):
        raise ValueError("not a message of the warm-worker protocol: %r" % line[:200])
    return message


def _fifo(path, flags):
    """Open a FIFO without blocking (the caller holds it open; when it is gone, reads
    end and writes fail), then make it blocking."""
    import fcntl

    fd = os.open(path, flags | os.O_NONBLOCK)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def _redirected(item_dir, env, call):
    """call() with fds 1 and 2 going to the item's stdout and stderr files, and the
    item's environment set."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    before = dict((k, os.environ.get(k)) for k in env)
    try:
        for fd, name in ((1, "stdout"), (2, "stderr")):
            target = os.open(
                os.path.join(item_dir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644
            )
            os.dup2(target, fd)
            os.close(target)
        os.environ.update(env)
        return call()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def worker(call_dir, name):
    folder = os.path.join(call_dir, "workers", name)
    requests = os.fdopen(_fifo(os.path.join(folder, "requests"), os.O_RDONLY), "rb")
    replies = _fifo(os.path.join(folder, "replies"), os.O_WRONLY)
    cache = {}
    os.write(replies, encode(HELLO, protocol=PROTOCOL))
    while True:
        line = requests.readline()
        if not line:
            return EXIT_OK  # the caller closed the requests: the map is over
        try:
            request = decode(line)
            if request[KIND] != CALL:
                continue
            item = str(request["item"])
            env = dict((str(k), str(v)) for k, v in (request.get("env") or {}).items())
            sub = request.get("call")
            base = call_dir if not sub else os.path.join(call_dir, os.path.basename(str(sub)))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        function_path = os.path.join(base, "function.pickle")
        if function_path not in cache:
            cache.clear()  # a warm worker of single calls: one function at a time
        item_dir = os.path.join(base, "items", item)
        try:
            code = _redirected(item_dir, env, lambda: run_call(function_path, item_dir, cache))
        except Exception as exc:  # this runtime failed: still answer the call
            code = EXIT_RUNTIME
            fields = _here()
            fields.update(status="runtime_error", exit_code=code, traceback=_traceback(exc))
            fields["message"] = "%s: %s" % (type(exc).__name__, exc)
            _write_json(os.path.join(item_dir, "outcome.json"), fields)
        os.write(replies, encode(DONE, item=item, code=code))


# -- Swarm: the call travels in the service, the outcome in its log ----------------------


def unpack(parts, call_dir, item, limit):
    """Join the call's parts (Swarm secrets of at most 500 KB each, mounted as files
    PARTS/nodus-part.NAME.N, NAME with __ for /) into CALL_DIR, run the call, then print
    its outcome files to stdout as frames, which the caller cuts out of the service's log.
    A result (or exception) that pickles to more than LIMIT bytes is refused, saying so.
    ITEM "-": a pod of a Kubernetes Indexed Job, whose parts hold every call of a map; its
    item is its index, NODUS_ITEM_INDEX, and the part items__INDEX__item its NODUS_ITEM."""
    if item == "-":
        item = os.environ.get("NODUS_ITEM_INDEX", "")
        if not item.isdigit():
            sys.stderr.write("nodus runtime: NODUS_ITEM_INDEX is not set: no item to call\n")
            return EXIT_RUNTIME
    prefix = "nodus-part."
    joined = {}
    for entry in sorted(os.listdir(parts)):
        if not entry.startswith(prefix):
            continue
        name, _, index = entry[len(prefix) :].rpartition(".")
        if name and index.isdigit():
            joined.setdefault(name, []).append((int(index), entry))
    for name, pieces in joined.items():
        target = os.path.join(call_dir, *name.split("__"))
        if not os.path.isdir(os.path.dirname(target)):
            os.makedirs(os.path.dirname(target))
        with open(target, "wb") as out:
            for _, entry in sorted(pieces):
                with open(os.path.join(parts, entry), "rb") as piece:
                    out.write(piece.read())
    item_dir = os.path.join(call_dir, "items", item)
    if not os.path.isdir(item_dir):
        os.makedirs(item_dir)
    label = os.path.join(item_dir, "item")
    if os.path.exists(label):
        with open(label, "rb") as handle:
            os.environ["NODUS_ITEM"] = handle.read().decode("utf-8", "replace")
    code = run_call(os.path.join(call_dir, "function.pickle"), item_dir, {})
    limit = int(limit or 0)
    names = [
        n
        for n in ("result.pickle", "exception.pickle")
        if os.path.exists(os.path.join(item_dir, n))
    ]
    size = sum(os.path.getsize(os.path.join(item_dir, n)) for n in names)
    if limit and size > limit:
        for n in names:
            os.unlink(os.path.join(item_dir, n))
        names = []
        outcome = {
            "status": "result_error",
            "exit_code": EXIT_RESULT,
            "result_bytes": size,
            "limit_bytes": limit,
        }
        outcome.update(_here())
        outcome["message"] = (
            "the %s pickles to %.1f MiB, over the %d MiB a value may have on Swarm (it comes "
            "back through the service's log)"
            % ("return value" if code == EXIT_OK else "exception", size / 2.0**20, limit >> 20)
        )
        _write_json(os.path.join(item_dir, "outcome.json"), outcome)
        code = EXIT_RESULT
    sys.stdout.flush()
    for n in names + ["outcome.json"]:
        _frame(os.path.join(item_dir, n), n)
    return code


def _frame(path, name):
    import base64

    out = sys.stdout.buffer if hasattr(sys.stdout, "buffer") else sys.stdout
    with open(path, "rb") as handle:
        data = handle.read()
    out.write(("%s begin %s %d\n" % (FRAME, name, len(data))).encode("ascii"))
    encoded = base64.b64encode(data)
    for start in range(0, len(encoded), FRAME_LINE):
        out.write(FRAME.encode("ascii") + b" " + encoded[start : start + FRAME_LINE] + b"\n")
    out.write(("%s end %s\n" % (FRAME, name)).encode("ascii"))
    out.flush()


def main(argv):
    # Live output even through a pipe: each line as it is printed.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)
        except (AttributeError, ValueError):
            pass
    if len(argv) == 3 and not argv[1].startswith("-"):
        item_dir = os.path.join(argv[1], "items", argv[2])
        return run_call(os.path.join(argv[1], "function.pickle"), item_dir, {})
    if len(argv) == 4 and argv[1] == "--worker":
        return worker(argv[2], argv[3])
    if len(argv) == 6 and argv[1] == "--unpack":
        return unpack(argv[2], argv[3], argv[4], argv[5])
    sys.stderr.write(
        "usage: bootstrap.py CALL_DIR ITEM | --worker CALL_DIR NAME"
        " | --unpack PARTS CALL_DIR ITEM LIMIT\n"
    )
    return EXIT_RUNTIME


if __name__ == "__main__":
    sys.exit(main(sys.argv))
