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

from rpc_candidate import serve_candidate
from rpc_evaluator import evaluate

__all__ = ["evaluate", "serve_candidate"]
