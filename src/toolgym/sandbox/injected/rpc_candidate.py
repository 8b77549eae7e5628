"""Function mode's CANDIDATE process (see rpc.py): it loads the submission and then only answers the
evaluator's calls, values as data (rpc_codec.py). Stdlib only; runs in the judge's children."""

import builtins
import os

import limits
from rpc_codec import Codec, Record, copy_back, mutable, recv, send


def _describe(e):
    try:
        name = type(e).__name__
    except BaseException:  # noqa: B036
        name = "Exception"
    try:
        msg = str(e)
    except BaseException:  # noqa: B036
        msg = ""
    kind = "mem" if isinstance(e, MemoryError) else "stop" if isinstance(e, StopIteration) else \
        "exc" if isinstance(e, Exception) else "base"
    return [str(name)[:100], str(msg)[:limits.MESSAGE_CHARS], kind]


def serve_candidate(program, fd):
    """Load the program, then answer the evaluator's calls on `fd` until it hangs up."""
    ns = {"__name__": "__submission__", "__builtins__": builtins}
    handles = []
    codec = _codec(ns, handles, fd)
    load_error = None
    try:
        exec(compile(program, "<submission>", "exec"), ns)
    except BaseException as e:  # noqa: B036
        load_error = _describe(e)
    del program
    while True:
        req = recv(fd)
        if req is None:
            os._exit(0)
        try:
            send(fd, _answer(req, ns, handles, codec, load_error))
        except BaseException as e:  # noqa: B036
            try:
                send(fd, {"x": _describe(e)})
            except BaseException:  # noqa: B036
                os._exit(1)


def _codec(ns, handles, fd):
    """The candidate's codec: the program's classes by name, its objects as data or handles, and what the
    test lends it (objects, functions, iterators) as stand-ins whose every use is a call back on `fd`."""
    def classes(name):
        v = ns.get(name)
        return v if isinstance(v, type) else None

    def by_value(v):
        # a class may claim any __module__: a result is safe anyway, since it travels as data only (a
        # non-data iterable as its items, anything else refused), see Codec.encode(data=True)
        return getattr(type(v), "__module__", None) == "__submission__" or isinstance(v, Record)

    def ask(req, args=()):
        send(fd, req)
        reply = recv(fd)
        if reply is None:
            os._exit(0)
        if "x" in reply:
            raise RuntimeError(f"the test's code raised {reply['x'][0]}: {reply['x'][1]}")
        memo = {}
        value = codec.decode(reply["v"], memo)
        for orig, new in zip(args, reply.get("m") or [], strict=False):
            if new is not None:  # the test's function changed the program's argument (read4(buf4))
                copy_back(orig, codec.decode(new, memo), by_value)
        return value

    class TestObject:
        """An object of the test (e.g. LeetCode's MountainArray implementation), lent: the program
        may call its public methods (each a call back); its data never comes over."""

        def __init__(self, cid):
            object.__setattr__(self, "_cid", cid)

        def __getattr__(self, name):
            method = ask({"cb": object.__getattribute__(self, "_cid"), "attr": str(name)})
            object.__setattr__(self, name, method)  # a method: asked for once, then called directly
            return method

    class TestIterator:
        """An iterator of the test (e.g. a generator argument): next() runs in the evaluator."""

        def __init__(self, cid):
            self._cid = cid

        def __iter__(self):
            return self

        def __next__(self):
            try:
                return ask({"cb": self._cid, "next": 1})
            except RuntimeError as e:
                if str(e).startswith("the test's code raised StopIteration"):
                    raise StopIteration from None
                raise

    def callback(cid, kind):
        stand_in = _stand_in(cid, kind)
        codec.lent[id(stand_in)] = (cid, stand_in)
        return stand_in

    def _stand_in(cid, kind):
        if kind == "o":
            return TestObject(cid)
        if kind == "i":
            return TestIterator(cid)

        def call_back(*args, **kwargs):
            """A function of the test, run by the evaluator (e.g. LeetCode's guess())."""
            memo = {}
            return ask({"cb": cid, "a": [codec.encode(a, memo) for a in args],
                        "k": [[k, codec.encode(a, memo)] for k, a in kwargs.items()]}, args)
        return call_back

    codec = Codec(classes, by_value, handles, make_callback=callback, names=ns)
    return codec


def _names(ns, codec):
    """The program's top-level names for the evaluator: classes and callables by kind, values as data (or as
    handles where they cannot be data)."""
    names = []
    for k, v in list(ns.items()):
        if k.startswith("__") or type(v).__name__ == "module":
            continue
        if isinstance(v, type):
            names.append([k, "class"])
        elif callable(v):
            names.append([k, "callable"])
        else:
            try:
                names.append([k, "value", codec.encode(v)])
            except BaseException:  # noqa: B036
                names.append([k, "object", codec.encode(v, handle=True)])
    return {"names": names}


def _answer(req, ns, handles, codec, load_error):
    """The reply to one request of the evaluator; what this raises goes back to it as the call's exception."""
    op = req.get("op")
    if op == "names":
        return {"load_error": load_error} if load_error is not None else _names(ns, codec)
    memo = {}
    if op == "setglobal":  # the test sets a name in the program's namespace
        ns[str(req["n"])] = codec.decode(req["a"][0], memo)
        return {"v": None}
    t = req["t"]
    obj = handles[int(t["h"])] if "h" in t else ns[t["n"]]
    if op == "setattr":  # the test builds a structure out of the program's objects
        setattr(obj, str(req["n"]), codec.decode(req["a"][0], memo))
        return {"v": None}
    if op == "getattr":
        return {"v": _encode_result(codec, getattr(obj, str(req["n"])), refs=True)}
    args = [codec.decode(a, memo) for a in req.get("a", [])]
    kwargs = {str(k): codec.decode(a, memo) for k, a in req.get("k", [])}
    fn = getattr(obj, str(req["n"])) if op == "method" else obj
    value = fn(*args, **kwargs)
    out_memo = {}
    codec.origins = {id(o): n for n, o in memo.items()}  # what came from the test's arguments
    try:
        reply = {"v": codec.encode(value, out_memo, handle=bool(req.get("ctor")))
                 if req.get("ctor") else _encode_result(codec, value, out_memo)}
        reply["m"] = [codec.encode(a, out_memo) if mutable(a) else None for a in args]
        reply["mk"] = [[k, codec.encode(a, out_memo)] for k, a in kwargs.items() if mutable(a)]
    finally:
        codec.origins = None
    return reply


def _encode_result(codec, value, memo=None, refs=False):
    """An attribute read (refs: the program's objects by reference, so the test may change them in place)
    or a call's result: data only (no handle: the test's reads of a result never run program code; a
    result that cannot become data raises, and the test fails with it)."""
    if refs:
        try:
            return codec.encode(value, memo, refs=True)
        except (TypeError, ValueError, RecursionError):
            return codec.encode(value, handle=True)
    return codec.encode(value, memo, data=True)

