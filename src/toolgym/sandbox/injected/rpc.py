"""Function-mode tests across a process boundary. Stdlib only; runs in the judge's children.

The submission runs in the CANDIDATE process (uid 65534): it loads the program and then
only answers calls. The test runs in the EVALUATOR process (uid 65533): the program's
top-level names are proxies there, and calling one sends the arguments to the candidate
and brings the result back as data. The test code, its expected values and the verdict
channel exist only in the evaluator; nothing the candidate sends back is ever executed
there (a returned object arrives as its class name and attributes, never as code), so a
rigged ``__eq__``, a frame walk, a gc hunt or a forged protocol message in the candidate
decides nothing.

Values travel as JSON trees: None, bool, int, float, str as themselves; lists, tuples,
dicts, sets, frozensets, bytes, bytearrays and complex numbers tagged; an instance of a
class of the program, or of a DATA class of the test, as {"O": class name, "A": attributes}
(rebuilt as the receiver's class of that name when it has one, e.g. LeetCode's
ListNode/TreeNode, else a plain record); shared and cyclic containers by reference; anything
else (a generator, a function, an instance made by calling a program's class) as a handle that
stays in the candidate. Mutable arguments are copied back after each call (and after each call
back into the test, e.g. read4(buf4) filling the program's list), so in-place algorithms
(``nums.sort()``) work as in one process.

A test class is data (`_data_class`) when it has no behaviour besides dunders, or when the test
lists it in a top-level ``__by_value__`` (node classes with helper methods, e.g. LeetCode's
ListNode/TreeNode/GraphNode). Any other object of the test (a judge-side API such as LeetCode's
Master, MountainArray, Robot) is LENT: the program gets a stand-in on which it may only call the
class's public methods; its data (``master.secret``, ``mountain_arr._arr``, a call counter) is
never sent, and nothing is ever copied back into it. Data the program sends is rebuilt as a
test class only when that class is data, so the program never makes an object of a judge-side
class either.
"""

import base64
import builtins
import json
import os
import sys
import types

import frames
import limits

# what never travels as data, whatever its class says of itself
_ITERATORS = frozenset({type(iter(x)) for x in ([], (), range(0), "", b"", bytearray(), {}, set(), {}.values(),
                                               {}.items(), reversed([]))}
                       | {types.GeneratorType, map, filter, zip, enumerate, reversed})


class _deep:  # noqa: N801
    """Room for long linked lists and deep trees while a value is encoded or decoded."""

    def __enter__(self):
        self.old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(self.old, 20000))

    def __exit__(self, *exc):
        sys.setrecursionlimit(self.old)


# ------------------------------------------------------------------------------ framing
def send(fd, obj):
    """One JSON frame (see frames.py); values past JSON (NaN, infinities) as Python's json writes them."""
    with _deep():
        body = json.dumps(obj, allow_nan=True).encode("utf-8", "surrogatepass")
    frames.write(fd, frames.frame(body))


def recv(fd):
    """One frame; None at the end of the stream; ValueError for anything malformed (too large included)."""
    body = frames.read(fd)
    if body is None:
        return None
    with _deep():
        return json.loads(body.decode("utf-8", "surrogatepass"))


# ------------------------------------------------------------------------------ values
class Record:
    """An object received by value whose class the receiver does not have."""

    def __repr__(self):
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({inner})"


class Codec:
    """Encodes and decodes values for one side. `classes` finds the receiver's class of a
    name; `handles` keeps objects that cannot travel (candidate side only)."""

    def __init__(self, classes, by_value, handles=None, proxy=None, make_proxy=None, callbacks=None,
                 make_callback=None, names=None, lendable=None):
        self.classes, self.by_value, self.handles, self.proxy = classes, by_value, handles, proxy
        self.make_proxy = make_proxy
        self.callbacks = callbacks  # evaluator side: its functions the candidate may call back
        self.make_callback = make_callback  # candidate side: a stand-in that calls back
        self.names = names  # candidate side: the program's namespace
        self.lendable = lendable  # evaluator side: what of the test the program may use by reference
        self.records = {}
        self.refs = False
        self.data = False
        # identity across one call (round-7 z06): the candidate tags what it sends back that came from the
        # test's arguments (`origins`: id -> the index the evaluator gave it), and the evaluator decodes a
        # tagged value into its own original, in place (`originals`: index -> object it sent by value)
        self.origins = None
        self.originals = None
        self.data_dec = False
        # candidate side: id(stand-in) -> (index, stand-in) for each object or function the test lent, so
        # that one sent back is the test's own again (`{"E": index}`), not a handle on the stand-in
        self.lent = {}

    # -- encode
    def encode(self, v, memo=None, handle=False, refs=False, data=False):
        """`handle`: send `v` itself by reference; `refs`: send objects of the sender's classes by
        reference (an attribute read: the test may go on to change the object in place); `data`: no
        handle at all (a call's result: the test then reads only data, never runs the sender's code):
        what would be one is an iterable's items, taken once, or a TypeError."""
        memo = {} if memo is None else memo
        if handle:
            return self._handle(v)
        self.refs, self.data = refs, data
        try:
            with _deep():
                return self._enc(v, memo)
        finally:
            self.refs, self.data = False, False

    def _handle(self, v, n=None):
        if self.handles is None:
            kind = self.lendable(v) if self.lendable is not None else None
            if kind is None:
                raise TypeError(f"cannot send a {type(v).__name__} to the program")
            # the test's function, object or iterator, used by the program through calls back
            self.callbacks.append(v)
            return {"E": len(self.callbacks) - 1, "c": kind}
        self.handles.append(v)
        out = {"H": len(self.handles) - 1, "t": type(v).__name__}
        if n is not None:
            out["#"] = n  # the same object again is a reference to this handle
        return out

    def _enc(self, v, memo):
        t = type(v)
        if v is None or t is bool or t is str:
            return v
        if t is int or t is float:
            return v
        if isinstance(v, bool):
            return bool(v)
        if isinstance(v, int):
            return int.__index__(v)
        if isinstance(v, float):
            return float.__float__(v)
        if isinstance(v, str):
            return str.__str__(v)
        key = id(v)
        if key in memo:
            return {"R": memo[key][0]}
        if self.proxy is not None and isinstance(v, self.proxy):
            return {"P": object.__getattribute__(v, "_target")}  # the program's own object, by name or handle
        if key in self.lent:
            return {"E": self.lent[key][0]}  # the test's lent object back to the test
        n = len(memo)
        memo[key] = (n, v)  # keeps v alive, so its id is not reused during this encode
        out = self._enc_value(v, t, memo, n)
        if self.origins is not None and key in self.origins and ("L" in out or "D" in out or "S" in out
                                                                 or "BA" in out or "O" in out):
            out["a"] = self.origins[key]  # the test's own object, changed or not: the same object there
        return out

    def _enc_value(self, v, t, memo, n):
        if isinstance(v, list):
            return {"L": [self._enc(x, memo) for x in list.__iter__(v)], "#": n}
        if isinstance(v, dict):
            return {"D": [[self._enc(k, memo), self._enc(x, memo)] for k, x in dict.items(v)], "#": n}
        if isinstance(v, tuple):
            return {"T": [self._enc(x, memo) for x in tuple.__iter__(v)], "#": n}
        if isinstance(v, (set, frozenset)):
            return {"F" if isinstance(v, frozenset) else "S": [self._enc(x, memo) for x in v], "#": n}
        if isinstance(v, (bytes, bytearray)):
            return {"BA" if isinstance(v, bytearray) else "B": base64.b64encode(bytes(v)).decode(), "#": n}
        if isinstance(v, complex):
            return {"C": [v.real, v.imag], "#": n}
        name = t.__module__ + "." + t.__name__
        if name in ("decimal.Decimal", "fractions.Fraction"):
            return {"N": name, "s": str(v), "#": n}
        if self.by_value(v) and not (self.refs and self.handles is not None):
            try:
                attrs = object.__getattribute__(v, "__dict__")
            except AttributeError:  # no attributes of its own (__slots__): not a record
                attrs = None
            if isinstance(attrs, dict):
                return {"O": t.__name__, "A": [[k, self._enc(x, memo)] for k, x in dict.items(attrs)
                                               if isinstance(k, str)], "#": n}
        if self.data and t not in _ITERATORS:
            # round-7 red team z02: a handle in a result let each of the test's iter()/len()/in run program
            # code. Iterators of the language (a generator, iter(list)) stay handles: they are read once, as
            # in one process; any other iterable travels as its items, taken once, here
            if not hasattr(t, "__iter__"):
                raise TypeError(f"a {t.__name__} is not data: a result must be")
            return {"L": [self._enc(x, memo) for x in list(v)], "#": n}
        return self._handle(v, n)

    # -- decode (pure: builds data, runs none of the sender's code)
    def decode(self, d, memo=None, data=False):
        """`data` (the evaluator reading a call's result or copied-back arguments): the rule that a result
        is data is kept HERE, not by the sender, whose process is the program's (round-8 red team r01:
        a program that patched its own encoder sent its rigged object as a handle): a handle anywhere in
        it is a `ResultIterator`, read once as a generator is, and nothing else of the program."""
        memo = {} if memo is None else memo
        self.data_dec = data
        try:
            with _deep():
                return self._dec(d, memo)
        finally:
            self.data_dec = False

    def _dec(self, d, memo):
        if not isinstance(d, dict):
            return d
        if "R" in d:
            return memo[d["R"]]
        if "a" in d and self.originals is not None:
            orig = self._original(d)
            if orig is not None:
                return self._dec_into(orig, d, memo)
        if "L" in d:
            out = memo[d["#"]] = []
            out.extend(self._dec(x, memo) for x in d["L"])
            return out
        if "D" in d:
            out = memo[d["#"]] = {}
            for k, x in d["D"]:
                out[self._dec(k, memo)] = self._dec(x, memo)
            return out
        if "S" in d:  # a set can only hold hashable items, never itself: filled after registering
            out = memo[d["#"]] = set()
            out.update(self._dec(x, memo) for x in d["S"])
            return out
        if "T" in d:
            out = tuple(self._dec(x, memo) for x in d["T"])
        elif "F" in d:
            out = frozenset(self._dec(x, memo) for x in d["F"])
        elif "B" in d:
            out = base64.b64decode(d["B"])
        elif "BA" in d:
            out = bytearray(base64.b64decode(d["BA"]))
        elif "C" in d:
            out = complex(*d["C"])
        elif "N" in d:
            import decimal
            import fractions

            out = {"decimal.Decimal": decimal.Decimal, "fractions.Fraction": fractions.Fraction}[d["N"]](str(d["s"]))
        else:
            out = None
        if out is not None:
            memo[d["#"]] = out
            return out
        if "O" in d:
            cls = self._class(str(d["O"]))
            obj = memo[d["#"]] = cls.__new__(cls)
            for k, x in d["A"]:
                k = str(k)
                value = self._dec(x, memo)
                if self.handles is None:
                    _check_attribute(cls, k, value, self.proxy)
                obj.__dict__[k] = value
            return obj
        if "H" in d:
            if self.handles is not None:
                out = self.handles[int(d["H"])]
            else:
                out = self.make_proxy(int(d["H"]), str(d.get("t", "object")))
                if self.data_dec:
                    out = ResultIterator(out)
            if "#" in d:
                memo[d["#"]] = out
            return out
        if "P" in d and self.handles is not None:
            t = d["P"]
            return self.handles[int(t["h"])] if "h" in t else self.names[str(t["n"])]
        if "E" in d:
            if self.handles is None:
                return self.callbacks[int(d["E"])]  # the test's own lent object or function, sent back
            if self.make_callback is None:
                raise ValueError("malformed value")
            return self.make_callback(int(d["E"]), str(d.get("c", "f")))
        raise ValueError("malformed value")

    def _original(self, d):
        """The evaluator's own object a tagged value stands for, when it is of the value's kind (a list
        for a list, a data object of the class named): else None, and the value is decoded as new."""
        orig = self.originals.get(d["a"]) if isinstance(d["a"], int) else None
        if "O" in d:
            ok = self.by_value(orig) and type(orig).__name__ == d["O"] and \
                isinstance(getattr(orig, "__dict__", None), dict) and not isinstance(orig, type)
        else:
            kind = next((t for k, t in (("L", list), ("D", dict), ("S", set), ("BA", bytearray)) if k in d), None)
            ok = kind is not None and isinstance(orig, kind)
        return orig if ok else None

    def _dec_into(self, orig, d, memo):
        """Decode a tagged value into the original it stands for, in place (as the call changed it)."""
        memo[d["#"]] = orig
        if "L" in d:
            orig[:] = [self._dec(x, memo) for x in d["L"]]
        elif "D" in d:
            pairs = [(self._dec(k, memo), self._dec(x, memo)) for k, x in d["D"]]
            orig.clear()
            orig.update(pairs)
        elif "S" in d:
            items = [self._dec(x, memo) for x in d["S"]]
            orig.clear()
            orig.update(items)
        elif "BA" in d:
            orig[:] = base64.b64decode(d["BA"])
        else:
            attrs = {}
            for k, x in d["A"]:
                k = str(k)
                attrs[k] = self._dec(x, memo)
                _check_attribute(type(orig), k, attrs[k], self.proxy)
            orig.__dict__.clear()
            orig.__dict__.update(attrs)
        return orig

    def _class(self, name):
        cls = self.classes(name)
        if isinstance(cls, type) and not issubclass(cls, BaseException):
            return cls
        if name not in self.records:
            self.records[name] = type(name, (Record,), {})
        return self.records[name]


def _check_attribute(cls, name, value, proxy):
    """An attribute the program sends for an object of one of the TEST's classes (its code runs
    in the evaluator): plain data only, never shadowing what the class defines (a method, a
    property), never the program's live objects. Anything else breaks the call channel."""
    if name.startswith("__") or not name.isidentifier():
        raise ValueError(f"attribute {name!r} refused")
    if issubclass(cls, Record):
        cls = object  # a record has nothing to shadow, but holds no code of the program either
    if name in dir(cls) and (callable(getattr(cls, name, None)) or
                             isinstance(cls.__dict__.get(name), (property, staticmethod, classmethod))):
        raise ValueError(f"attribute {name!r} would shadow the class's own {name}")
    if proxy is not None and isinstance(value, proxy) or callable(value) and not isinstance(value, type):
        raise ValueError(f"attribute {name!r} holds code of the program")


def _data_class(cls, marked):
    """Whether objects of the test's class `cls` travel by value (and are copied back): it holds
    data only (no attribute besides dunders that is code or a descriptor, in it or a base of the
    test), or the test lists its name in `__by_value__` (`marked`). A judge-side class (a Master
    with its secret and call count, a call-limited MountainArray) is neither, so it is lent."""
    if not isinstance(cls, type) or getattr(cls, "__module__", None) != "__test__":
        return False
    if isinstance(marked, (tuple, list, set, frozenset)) and cls.__name__ in marked:
        return True
    for c in cls.__mro__[:-1]:
        if getattr(c, "__module__", None) != "__test__":
            return False
        for k, x in vars(c).items():
            if not (k.startswith("__") and k.endswith("__")) and (callable(x) or hasattr(type(x), "__get__")):
                return False
    return cls.__mro__[-1] is object


def _public_method(obj, name):
    """What the program may take from a lent object of the test: a public method of its class
    (used as a call back), never its data (`master.secret`, `mountain_arr._arr`) nor a private name."""
    import types

    if name.startswith("_") or not name.isidentifier() or name in getattr(obj, "__dict__", {}):
        return False
    for c in type(obj).__mro__:
        if name in vars(c):
            return isinstance(vars(c)[name], (types.FunctionType, staticmethod, classmethod))
    return False


def _mutable(v):
    return isinstance(v, (list, dict, set, bytearray)) or hasattr(type(v), "__dict__") and \
        isinstance(getattr(v, "__dict__", None), dict) and not isinstance(v, type)


def _copy_back(orig, new, data):
    """Make the sender's argument `orig` look like the receiver's after the call. `data(orig)`:
    an object that went by value (a data class's); anything lent is never written into. An original that
    came back tagged was decoded into in place already (`new is orig`)."""
    if new is orig:
        return
    if isinstance(orig, list) and isinstance(new, list):
        orig[:] = new
    elif isinstance(orig, dict) and isinstance(new, dict):
        orig.clear()
        orig.update(new)
    elif isinstance(orig, set) and isinstance(new, set):
        orig.clear()
        orig.update(new)
    elif isinstance(orig, bytearray) and isinstance(new, bytearray):
        orig[:] = new
    elif data(orig) and type(new) is type(orig) and isinstance(getattr(orig, "__dict__", None), dict) \
            and not isinstance(orig, type):
        # same class only (decoding checked every attribute against it); an object the program
        # turned into something else is not poured into the test's object
        orig.__dict__.clear()
        orig.__dict__.update(new.__dict__)


# ------------------------------------------------------------------------------ candidate side
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
                _copy_back(orig, codec.decode(new, memo), by_value)
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
    load_error = None
    try:
        exec(compile(program, "<submission>", "exec"), ns)
    except BaseException as e:  # noqa: B036
        load_error = _describe(e)
    del program

    def target(t):
        return handles[int(t["h"])] if "h" in t else ns[t["n"]]

    while True:
        req = recv(fd)
        if req is None:
            os._exit(0)
        op = req.get("op")
        try:
            if op == "names":
                if load_error is not None:
                    send(fd, {"load_error": load_error})
                    continue
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
                send(fd, {"names": names})
                continue
            memo = {}
            if op == "setglobal":  # the test sets a name in the program's namespace
                ns[str(req["n"])] = codec.decode(req["a"][0], memo)
                send(fd, {"v": None})
                continue
            obj = target(req["t"])
            if op == "setattr":  # the test builds a structure out of the program's objects
                setattr(obj, str(req["n"]), codec.decode(req["a"][0], memo))
                send(fd, {"v": None})
                continue
            if op == "getattr":
                value = getattr(obj, str(req["n"]))
                send(fd, {"v": _encode_result(codec, value, refs=True)})
                continue
            args = [codec.decode(a, memo) for a in req.get("a", [])]
            kwargs = {str(k): codec.decode(a, memo) for k, a in req.get("k", [])}
            fn = getattr(obj, str(req["n"])) if op == "method" else obj
            value = fn(*args, **kwargs)
            out_memo = {}
            codec.origins = {id(o): n for n, o in memo.items()}  # what came from the test's arguments
            try:
                reply = {"v": codec.encode(value, out_memo, handle=bool(req.get("ctor")))
                         if req.get("ctor") else _encode_result(codec, value, out_memo)}
                reply["m"] = [codec.encode(a, out_memo) if _mutable(a) else None for a in args]
                reply["mk"] = [[k, codec.encode(a, out_memo)] for k, a in kwargs.items() if _mutable(a)]
            finally:
                codec.origins = None
            send(fd, reply)
        except BaseException as e:  # noqa: B036
            try:
                send(fd, {"x": _describe(e)})
            except BaseException:  # noqa: B036
                os._exit(1)


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


# ------------------------------------------------------------------------------ evaluator side
class CandidateAbort(BaseException):  # noqa: N818 - propagates through `except Exception`
    """The program raised SystemExit/KeyboardInterrupt/another BaseException, or ended."""


class CandidateError(Exception):
    """An exception of a type the evaluator does not have (e.g. one the program defined)."""


class Link:
    """The evaluator's end of the call channel."""

    def __init__(self, fd):
        self.fd = fd
        self.dead = False
        self.codec = None
        self.callbacks = []

    def _call_back(self, req):
        """Run a function of the test that the program called (its arguments arrive as data)."""
        obj = self.callbacks[int(req["cb"])]
        memo = {}
        args = [self.codec.decode(a, memo) for a in req.get("a", [])]
        kwargs = {str(k): self.codec.decode(a, memo) for k, a in req.get("k", [])}
        try:
            kind = self.codec.lendable(obj)
            if "attr" in req:
                name = str(req["attr"])
                if kind != "o" or not _public_method(obj, name):
                    raise AttributeError(name)
                value = getattr(obj, name)
            elif "next" in req:
                if kind != "i":
                    raise TypeError("not an iterator")
                value = next(obj)
            else:
                if kind != "f":
                    raise TypeError("not a function of the test")
                value = obj(*args, **kwargs)
            out = {}
            reply = {"v": self.codec.encode(value, out),
                     "m": [self.codec.encode(a, out) if not isinstance(a, Remote) and _mutable(a) else None
                           for a in args]}
        except Exception as e:  # noqa: BLE001 - reported to the program as an error of the call
            reply = {"x": [type(e).__name__, str(e)[:limits.MESSAGE_CHARS], "exc"]}
        send(self.fd, reply)

    def request(self, req, args=()):
        """Send `req`, serve the program's calls back, and return the reply's value (data only for a call's
        result, but a constructor's new object), the decode memo and the reply; copies arguments back."""
        if self.dead:
            raise CandidateAbort("the program ended during the test")
        try:
            send(self.fd, req)
            reply = recv(self.fd)
            while reply is not None and "cb" in reply:  # the program calls one of the test's functions
                self._call_back(reply)
                reply = recv(self.fd)
            if reply is None:
                raise ValueError("end of stream")
            if "x" in reply:
                name, msg, kind = (str(x) for x in reply["x"])
            else:
                memo = {}
                call = req.get("op") in ("call", "method")
                value = self.codec.decode(reply["v"], memo, data=call and not req.get("ctor"))
                for orig, new in zip(args, reply.get("m") or [], strict=False):
                    if new is not None:
                        _copy_back(orig, self.codec.decode(new, memo, data=True), self.codec.by_value)
                return value, memo, reply
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
            # the stream broke or carried something malformed: the program failed the test
            self.dead = True
            raise CandidateAbort("the program ended or broke the call channel during the test") from None
        raise _exception(name, msg, kind)


def _exception(name, msg, kind):
    """The evaluator's version of an exception the program raised (built here from its name)."""
    if kind == "mem":
        return MemoryError(msg)
    if kind == "stop":
        return StopIteration()
    if kind == "base":
        return CandidateAbort(f"{name}: {msg}" if msg else name)
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == "builtins":
        try:
            return cls(msg) if msg else cls()
        except Exception:  # noqa: BLE001 - a type that wants other arguments
            pass
    return CandidateError(f"{name}: {msg}" if msg else name)



class Remote:
    """A name or object of the program, living in the candidate process."""

    __slots__ = ("_hid", "_target", "_kind", "_link", "_tname")

    def __init__(self, link, target, kind, tname):
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_tname", tname)
        object.__setattr__(self, "_hid", target.get("h", -1))

    def _call(self, op, args, kwargs, name=None):
        link = object.__getattribute__(self, "_link")
        codec = link.codec
        memo = {}
        req = {"op": op, "t": object.__getattribute__(self, "_target"),
               "a": [codec.encode(a, memo) for a in args],
               "k": [[k, codec.encode(a, memo)] for k, a in kwargs.items()]}
        if name is not None:
            req["n"] = name
        if object.__getattribute__(self, "_kind") == "class" and op == "call":
            req["ctor"] = True
        outer = codec.originals  # a call made while the test serves a call back keeps the outer call's
        codec.originals = {n: v for n, v in memo.values()}  # what the program may send back as the same object
        try:
            value, dmemo, reply = link.request(req, args)
            kw_new = dict(reply.get("mk") or [])
            for k, a in kwargs.items():
                if k in kw_new:
                    _copy_back(a, codec.decode(kw_new[k], dmemo, data=True), codec.by_value)
        finally:
            codec.originals = outer
        return value

    def __call__(self, *args, **kwargs):
        return self._call("call", args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__") and name not in ("__name__", "__qualname__", "__doc__"):
            raise AttributeError(name)  # interpreter internals stay on this side
        link = object.__getattribute__(self, "_link")
        value, _, _ = link.request({"op": "getattr", "t": object.__getattribute__(self, "_target"), "n": name})
        return value

    def __setattr__(self, name, value):
        link = object.__getattribute__(self, "_link")
        link.request({"op": "setattr", "t": object.__getattribute__(self, "_target"), "n": str(name),
                      "a": [link.codec.encode(value)]})

    def __iter__(self):
        it = self._call("method", (), {}, "__iter__")
        return it if isinstance(it, Remote) else iter(it)

    def __next__(self):
        return self._call("method", (), {}, "__next__")

    def __len__(self):
        n = self._call("method", (), {}, "__len__")
        if type(n) is not int:
            raise TypeError("__len__ did not return an int")
        return n

    def __getitem__(self, key):
        return self._call("method", (key,), {}, "__getitem__")

    def __contains__(self, item):
        return self._call("method", (item,), {}, "__contains__") is True

    def __repr__(self):
        return f"<{object.__getattribute__(self, '_tname')} of the program>"

    __str__ = __repr__

    def __eq__(self, other):
        return self is other  # decided here, never by the program

    def __ne__(self, other):
        return self is not other

    __hash__ = object.__hash__

    def __or__(self, other):  # `Node | None` in the test's annotations
        return self

    __ror__ = __or__

    def __mro_entries__(self, bases):
        return (object,)  # a test class "subclassing" a program's interface class (LeetCode's MountainArray)


class ResultIterator:
    """A handle in a call's result (one of the language's iterators, a generator): the test may only read
    it once, as in one process. next() crosses (each item as data); once it is exhausted or has raised, it
    stays so, whatever the program's object would answer next (so two reads cannot see two contents)."""

    __slots__ = ("_remote", "_done")

    def __init__(self, remote):
        self._remote = remote
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        try:
            return self._remote._call("method", (), {}, "__next__")
        except BaseException:
            self._done = True
            raise

    def __repr__(self):
        return "<iterator of the program>"


class ProgramNamespace:
    """`__program__` in the test: setting an attribute sets a global of the program (tests
    that inject a judge-side function, e.g. LeetCode's guess())."""

    __slots__ = ("_link",)

    def __init__(self, link):
        object.__setattr__(self, "_link", link)

    def __setattr__(self, name, value):
        link = object.__getattribute__(self, "_link")
        link.request({"op": "setglobal", "t": {}, "n": str(name), "a": [link.codec.encode(value)]})


def evaluate(test, verdict_fd, fd):
    """Run one test against the candidate on `fd`; write one verdict frame on `verdict_fd`."""
    link = Link(fd)
    tns = {"__name__": "__test__", "__builtins__": builtins}

    def classes(name):
        """Data of the program is rebuilt as the test's class of that name only when that class is
        data too: never as a judge-side class (a forged Master) that the test would trust."""
        v = tns.get(name)
        return v if isinstance(v, type) and _data_class(v, tns.get("__by_value__")) else None

    def by_value(v):
        """Data: what the program sent, and objects of the test's data classes (ListNode, TreeNode,
        ...), whatever the program defines; every other object of the test is lent by reference."""
        return isinstance(v, Record) or _data_class(type(v), tns.get("__by_value__"))

    def lendable(v):
        """What the program may use by reference: functions the test defined ("f"), methods and
        instances of its classes ("f", "o"), iterators ("i", next() only). Nothing else of the
        evaluator (frames, modules, builtins, code) is ever handed over."""
        import types

        if isinstance(v, types.FunctionType):
            return "f" if v.__globals__ is tns else None
        if isinstance(v, types.MethodType):
            return "f" if isinstance(v.__func__, types.FunctionType) and v.__func__.__globals__ is tns \
                and lendable(v.__self__) in ("o", None) else None
        if not isinstance(v, type) and getattr(type(v), "__module__", None) == "__test__":
            return "o"
        import collections.abc

        if isinstance(v, collections.abc.Iterator):
            return "i"
        return None

    link.codec = Codec(classes, by_value, handles=None, proxy=Remote,
                       make_proxy=lambda hid, tname: Remote(link, {"h": hid}, "object", tname),
                       callbacks=link.callbacks, lendable=lendable)
    tns["__program__"] = ProgramNamespace(link)

    def verdict(tag, text=""):
        data = text.encode("utf-8", "replace")
        data = tag + (data if tag == b"V" else data[:2000])  # a value is parsed whole; messages cut
        frames.write(verdict_fd, frames.frame(data))
        os._exit(0)

    try:
        send(fd, {"op": "names"})
        reply = recv(fd)
        if "load_error" in reply:
            name, msg, kind = reply["load_error"]
            verdict(b"O" if kind == "mem" else b"E", f"{name}: {msg}" if msg else name)
        for item in reply["names"]:
            name, kind = str(item[0]), item[1]
            if name.startswith("__") or not name.isidentifier() or hasattr(builtins, name):
                continue  # the test sees the real builtins (and its own dunders), never the program's
            if kind in ("class", "callable"):
                tns[name] = Remote(link, {"n": name}, kind, name)
            else:
                tns[name] = link.codec.decode(item[2])
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        verdict(b"C")
    tns.update(__name__="__test__", __builtins__=builtins, __program__=ProgramNamespace(link))
    try:
        if test["kind"] == "call":
            fn = eval(test["call"], tns)
            value = fn(*test["args"], **test["kwargs"])
        else:
            exec(compile(test["code"], "<test>", "exec"), tns)
    except MemoryError as e:
        verdict(b"C" if link.dead else b"M", str(e))
    except AssertionError as e:
        verdict(b"C" if link.dead else b"W", _message(e))
    except BaseException as e:  # noqa: B036
        verdict(b"C" if link.dead else b"R", _message(e))
    if link.dead:
        verdict(b"C")
    if test["kind"] != "call":
        verdict(b"A")
    try:
        verdict(b"V", json.dumps(_plain(value), allow_nan=True))
    except (TypeError, ValueError):
        verdict(b"X", _short(value))


def _plain(v):
    """A received value as JSON data (tuples as lists); TypeError when it has no JSON form."""
    if v is None or type(v) in (bool, int, float, str):
        return v
    if type(v) in (list, tuple):
        return [_plain(x) for x in v]
    if type(v) is dict and all(type(k) is str for k in v):
        return {k: _plain(x) for k, x in v.items()}
    raise TypeError("not JSON")


def _short(v):
    try:
        return repr(v)[:limits.MESSAGE_CHARS]
    except Exception:  # noqa: BLE001
        return "<unprintable>"


def _message(e):
    name = type(e).__name__
    try:
        msg = str(e)
    except Exception:  # noqa: BLE001
        msg = ""
    return f"{name}: {msg}" if msg else name
