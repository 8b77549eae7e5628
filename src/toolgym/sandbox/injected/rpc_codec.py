"""Function mode's values on the wire (see rpc.py): JSON frames, and the codec that turns the values of
one process into trees of JSON and back in the other (data, references, handles, lent objects). Stdlib
only; runs in the judge's children."""


import base64
import json
import sys
import types

import frames

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


def data_class(cls, marked):
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


def public_method(obj, name):
    """What the program may take from a lent object of the test: a public method of its class
    (used as a call back), never its data (`master.secret`, `mountain_arr._arr`) nor a private name."""
    import types

    if name.startswith("_") or not name.isidentifier() or name in getattr(obj, "__dict__", {}):
        return False
    for c in type(obj).__mro__:
        if name in vars(c):
            return isinstance(vars(c)[name], (types.FunctionType, staticmethod, classmethod))
    return False


def mutable(v):
    return isinstance(v, (list, dict, set, bytearray)) or hasattr(type(v), "__dict__") and \
        isinstance(getattr(v, "__dict__", None), dict) and not isinstance(v, type)


def copy_back(orig, new, data):
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
