"""Function mode's EVALUATOR process (see rpc.py): it runs the test against proxies of the program's names
(each call goes to the candidate) and writes the verdict on a pipe only it and the harness hold. Stdlib
only; runs in the judge's children."""

import builtins
import json
import os
import types

import frames
import limits
from rpc_codec import Codec, Record, copy_back, data_class, mutable, public_method, recv, send


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
                if kind != "o" or not public_method(obj, name):
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
                     "m": [self.codec.encode(a, out) if not isinstance(a, Remote) and mutable(a) else None
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
                        copy_back(orig, self.codec.decode(new, memo, data=True), self.codec.by_value)
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
                    copy_back(a, codec.decode(kw_new[k], dmemo, data=True), codec.by_value)
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
        return v if isinstance(v, type) and data_class(v, tns.get("__by_value__")) else None

    def by_value(v):
        """Data: what the program sent, and objects of the test's data classes (ListNode, TreeNode,
        ...), whatever the program defines; every other object of the test is lent by reference."""
        return isinstance(v, Record) or data_class(type(v), tns.get("__by_value__"))

    def lendable(v):
        """What the program may use by reference: functions the test defined ("f"), methods and
        instances of its classes ("f", "o"), iterators ("i", next() only). Nothing else of the
        evaluator (frames, modules, builtins, code) is ever handed over."""

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
