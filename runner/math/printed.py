"""Answers that Python or sympy printed, read as what they are and written as LaTeX.

A Program-of-Thoughts answer is the last line a program printed: `[2, 3]` (what
`print(solve(...))` shows: the solutions, not a closed interval), `Matrix([[1], [2]])`,
`-1 + 2*I` (`I` is the imaginary unit, not a choice letter), `Interval.open(-oo, 3)`,
`Union(Interval(-oo, 1), Interval.open(2, oo))`, `Rational(1, 2)`, `sqrt(3)/2`,
`{x: 2, y: 1}` (the values), `{1: 2, -3: 1}` (`roots()`: the roots, not their
multiplicities), `(1+2j)`, `1e-05`, numpy's `[3. 2.]`, `[[1 2]\\n [3 4]]` (a matrix) and
`np.float64(2.0)`, an inequality's solution `(3 < x) & (x < oo)` (the interval `(3,
\\infty)`), `Poly(x**2 - 1, x, domain='ZZ')` (its expression).
`printed_latex(text)` writes such a line as the LaTeX the checker reads
(`2, 3`, `\\begin{pmatrix}1 \\\\ 2\\end{pmatrix}`, `(-\\infty, 3)`, ...).

Nothing of the text is ever evaluated: it is parsed by Python's own parser (`ast.parse`,
which builds a tree and runs nothing), and only a fixed set of node kinds and sympy names is
translated; anything else (an attribute, a lambda, an unknown call) means the text is not a
printed value and None comes back. The text is bounded (`MAX_PRINTED_CHARS`) and so is the
tree (`_MAX_NODES`, `_MAX_DEPTH`), because a program's output is hostile input.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence

__all__ = ["MAX_PRINTED_CHARS", "looks_printed", "printed_latex"]

MAX_PRINTED_CHARS = 4000
_MAX_NODES = 2000
_MAX_DEPTH = 60

# Text that only Python or sympy writes: `**`, `*`, a sympy constructor, `oo`, `2j`.
_PYTHON_MARKERS = re.compile(
    r"\*|\b(?:sqrt|Rational|Interval|Matrix|FiniteSet|Union|Intersection|Abs|exp|log|factorial"
    r"|binomial|root|cbrt|Eq|Integer|Float|Fraction|ImmutableMatrix|EmptySet|oo|pi)\b|\dj\b")

_NAMES = {"pi": "\\pi", "E": "e", "I": "i", "oo": "\\infty", "EmptySet": "\\emptyset",
          "Reals": "\\mathbb{R}", "S.Reals": "\\mathbb{R}", "S.EmptySet": "\\emptyset",
          "nan": None, "zoo": None, "True": "\\text{True}", "False": "\\text{False}"}
_GREEK = frozenset({"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
                    "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "phi", "chi",
                    "psi", "omega"})
_FUNCTIONS = {"sin": "\\sin", "cos": "\\cos", "tan": "\\tan", "cot": "\\cot", "sec": "\\sec",
              "csc": "\\csc", "asin": "\\arcsin", "acos": "\\arccos", "atan": "\\arctan",
              "sinh": "\\sinh", "cosh": "\\cosh", "tanh": "\\tanh"}
_RELATIONS = {"Eq": "=", "Ne": "\\neq", "Lt": "<", "Le": "\\le", "Gt": ">", "Ge": "\\ge"}
_INTERVALS = {"open": ("(", ")"), "Lopen": ("(", "]"), "Ropen": ("[", ")")}
_FLOAT = re.compile(r"(-?\d+(?:\.\d+)?)e([+-]?\d+)")
_INDEXED = re.compile(r"([A-Za-z])_?(\d+|[A-Za-z])")


class _NotPrinted(Exception):
    """The text is not a value Python or sympy printed (or is too big to read)."""


def looks_printed(text: str) -> bool:
    """Whether `text` reads as Python's or sympy's output rather than LaTeX: no backslash,
    no `^`, and something only Python writes (`**`, `*`, `sqrt(`, `Interval`, `oo`, ...)."""
    return "\\" not in text and "^" not in text and bool(_PYTHON_MARKERS.search(text))


def printed_latex(text: str) -> str | None:
    """`text`, a value as Python or sympy print it, as LaTeX; None when it is not one.
    Never evaluates the text (see the module docstring)."""
    text = text.strip()
    if not text or len(text) > MAX_PRINTED_CHARS or "\\" in text:
        return None
    text = _numpy_array(text)
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if sum(1 for _ in ast.walk(tree)) > _MAX_NODES:
        return None
    try:
        return _Writer().top(tree.body)
    except (_NotPrinted, RecursionError):
        return None


class _Writer:
    """LaTeX for the nodes of one printed value."""

    def __init__(self) -> None:
        self.depth = 0

    def top(self, node: ast.expr) -> str:
        """The whole value: a list is the solutions (`2, 3`), a dict the values it assigns."""
        if isinstance(node, ast.List):
            if not node.elts:
                return "\\emptyset"
            return ", ".join(self.item(element) for element in node.elts)
        if isinstance(node, ast.Dict):
            return self.assignment(node)
        return self.write(node)

    def item(self, node: ast.expr) -> str:
        """One solution in a list: a dict of `solve(..., dict=True)`, a list as a tuple."""
        if isinstance(node, ast.Dict):
            return self.assignment(node)
        if isinstance(node, ast.List):
            return "(" + ", ".join(self.write(element) for element in node.elts) + ")"
        return self.write(node)

    def assignment(self, node: ast.Dict) -> str:
        """`{x: 2, y: 1}` (`solve(..., dict=True)`) assigns values to variables: the values.
        `{1: 2, -3: 1}` (`roots()`) maps each root to its multiplicity: the roots."""
        variables = [isinstance(key, ast.Name) and key.id not in _NAMES for key in node.keys]
        if node.keys and not any(variables):
            return ", ".join(self.write(key) for key in node.keys if key is not None)
        if not all(variables):
            raise _NotPrinted
        values = [self.write(value) for value in node.values]
        if len(values) == 1:
            return values[0]
        return "(" + ", ".join(values) + ")"

    def write(self, node: ast.expr) -> str:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise _NotPrinted
        try:
            return self._write(node)
        finally:
            self.depth -= 1

    def _write(self, node: ast.expr) -> str:
        if isinstance(node, ast.Constant):
            return _constant(node.value)
        if isinstance(node, ast.Name):
            return _name(node.id)
        if isinstance(node, ast.Attribute):
            return _name(_dotted(node))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            sign = "-" if isinstance(node.op, ast.USub) else ""
            return sign + self.operand(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
            return _Conditions(self).union(node)
        if isinstance(node, ast.BinOp):
            return self.binary(node)
        if isinstance(node, ast.Tuple):
            return "(" + ", ".join(self.write(element) for element in node.elts) + \
                ("," if len(node.elts) == 1 else "") + ")"
        if isinstance(node, ast.Set):
            return "\\{" + ", ".join(self.write(element) for element in node.elts) + "\\}"
        if isinstance(node, ast.List):
            return "(" + ", ".join(self.write(element) for element in node.elts) + ")"
        if isinstance(node, ast.Call) and _dotted(node.func) == "Poly":
            return self.poly(node)
        if isinstance(node, ast.Call) and not node.keywords:
            return self.call(_dotted(node.func), node.args)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 \
                and type(node.ops[0]) in _COMPARISONS:
            return (f"{self.write(node.left)} {_COMPARISONS[type(node.ops[0])]} "
                    f"{self.write(node.comparators[0])}")
        raise _NotPrinted

    def poly(self, node: ast.Call) -> str:
        """`Poly(x**2 - 5*x + 6, x, domain='ZZ')`: the polynomial's expression. Its
        generators must be names and its only keyword the domain (the ring the
        coefficients are read in, which does not change the expression); a `modulus=`
        makes it a polynomial over a finite field, which no expression states."""
        if not node.args or any(not isinstance(generator, ast.Name) for generator in node.args[1:]):
            raise _NotPrinted
        for keyword in node.keywords:
            if keyword.arg != "domain" or not isinstance(keyword.value, ast.Constant) \
                    or not isinstance(keyword.value.value, str):
                raise _NotPrinted
        return self.write(node.args[0])

    def operand(self, node: ast.expr, *, tight: bool = False) -> str:
        """A sub-expression, in parentheses where precedence needs them: a sum inside a
        product, a difference or a sign; any operation or sign as a power's base (`tight`)."""
        written = self.write(node)
        sum_like = isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub))
        signed = isinstance(node, ast.UnaryOp) or (isinstance(node, ast.Constant)
                                                   and written.startswith("-"))
        operation = isinstance(node, ast.BinOp) and not isinstance(node.op, ast.Div)
        if sum_like or (tight and (signed or operation or written.startswith("\\frac"))):
            return f"\\left({written}\\right)"
        return written

    def binary(self, node: ast.BinOp) -> str:
        if isinstance(node.op, ast.Add):
            return f"{self.write(node.left)} + {self.write(node.right)}"
        if isinstance(node.op, ast.Sub):
            return f"{self.write(node.left)} - {self.operand(node.right)}"
        if isinstance(node.op, ast.Mult):
            return f"{self.operand(node.left)} \\cdot {self.operand(node.right)}"
        if isinstance(node.op, ast.Div):
            return f"\\frac{{{self.write(node.left)}}}{{{self.write(node.right)}}}"
        if isinstance(node.op, ast.Pow):
            return f"{{{self.operand(node.left, tight=True)}}}^{{{self.write(node.right)}}}"
        raise _NotPrinted

    def call(self, name: str, args: Sequence[ast.expr]) -> str:
        written = [self.write(argument) for argument in args]
        handler = _CALLS.get(name)
        if handler is None:
            if name in _FUNCTIONS and len(written) == 1:
                return f"{_FUNCTIONS[name]}{{\\left({written[0]}\\right)}}"
            if name in _RELATIONS and len(written) == 2:
                return f"{written[0]} {_RELATIONS[name]} {written[1]}"
            if name.startswith("Interval."):
                return _interval(name.removeprefix("Interval."), written)
            if name in ("Matrix", "ImmutableMatrix") and len(args) == 1:
                return self.matrix(args[0])
            raise _NotPrinted
        return handler(written)

    def matrix(self, node: ast.expr) -> str:
        if not isinstance(node, ast.List) or not node.elts:
            raise _NotPrinted
        rows = []
        for row in node.elts:
            cells = row.elts if isinstance(row, ast.List) else [row]
            rows.append(" & ".join(self.write(cell) for cell in cells))
        return "\\begin{pmatrix}" + " \\\\ ".join(rows) + "\\end{pmatrix}"


_COMPARISONS: dict[type[ast.cmpop], str] = {ast.Lt: "<", ast.LtE: "\\le", ast.Gt: ">",
                                            ast.GtE: "\\ge"}
# Which end a comparison bounds, with the variable on the left: `x < a` is an upper end.
_UPPER = {ast.Lt: False, ast.LtE: True}  # closed?
_LOWER = {ast.Gt: False, ast.GtE: True}
_FLIPPED: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.Lt: ast.Gt, ast.LtE: ast.GtE,
                                                    ast.Gt: ast.Lt, ast.GtE: ast.LtE}


class _Conditions:
    """sympy's print of an inequality's solution as the set it describes:
    `(3 < x) & (x < oo)` -> `(3, \\infty)`, `((-oo < x) & (x < 1)) | ((2 < x) & (x < oo))`
    -> `(-\\infty, 1) \\cup (2, \\infty)`. Each `&` joins a lower and an upper end of one
    variable (as `solve` and `reduce_inequalities` print them), each `|` a union; anything
    else (two variables, two lower ends, `Eq`) is not read."""

    def __init__(self, writer: _Writer) -> None:
        self.writer = writer
        self.variable: str | None = None

    def union(self, node: ast.expr) -> str:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return f"{self.union(node.left)} \\cup {self.union(node.right)}"
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
            ends = [self.end(node.left), self.end(node.right)]
            lower = [end for end in ends if end[0] == "lower"]
            upper = [end for end in ends if end[0] == "upper"]
            if len(lower) != 1 or len(upper) != 1:
                raise _NotPrinted
            (_, low, low_closed), (_, high, high_closed) = lower[0], upper[0]
            return _bracketed("[" if low_closed else "(", low, high, "]" if high_closed else ")")
        raise _NotPrinted

    def end(self, node: ast.expr) -> tuple[str, str, bool]:
        """("lower" or "upper", the bound, whether it is included) of `a < x` or `x <= a`."""
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            raise _NotPrinted
        operator: type[ast.cmpop] = type(node.ops[0])
        left, right = node.left, node.comparators[0]
        if _variable(right) and not _variable(left):  # `3 < x` is `x > 3`
            left, right = right, left
            operator = _FLIPPED.get(operator, ast.Eq)
        if not _variable(left) or _variable(right) or operator not in (*_UPPER, *_LOWER):
            raise _NotPrinted
        assert isinstance(left, ast.Name)
        if self.variable not in (None, left.id):
            raise _NotPrinted  # one variable throughout
        self.variable = left.id
        bound = self.writer.write(right)
        if operator in _UPPER:
            return "upper", bound, _UPPER[operator]
        return "lower", bound, _LOWER[operator]


def _variable(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id not in _NAMES and node.id not in _GREEK


# numpy prints a 1-D array without commas: `[3. 2.]`, `[ 1 -2  3]`.
_NUMPY_ARRAY = re.compile(r"\[\s*[-+]?[\d.]+(?:e[-+]?\d+)?(?:\s+[-+]?[\d.]+(?:e[-+]?\d+)?)*\s*\]")


# A 2-D array prints one row a line: `[[1 2]\n [3 4]]`.
_NUMPY_MATRIX = re.compile(r"\[\s*(?:\[[^\[\]]*\]\s*)+\]")
_NUMPY_ROW = re.compile(r"\[[^\[\]]*\]")


def _numpy_array(text: str) -> str:
    """numpy's print of an array as Python: a 1-D array as a list (`[3. 2.]` ->
    `[3., 2.]`), a 2-D one as a matrix (`[[1 2]\n [3 4]]` -> `Matrix([[1, 2], [3, 4]])`).
    A summarised print (`...`) or rows of different lengths are not read."""
    if "," in text:
        return text
    if _NUMPY_ARRAY.fullmatch(text):
        return "[" + ", ".join(text[1:-1].split()) + "]"
    if not _NUMPY_MATRIX.fullmatch(text):
        return text
    rows = [row.group(0) for row in _NUMPY_ROW.finditer(text[1:-1])]
    if any(not _NUMPY_ARRAY.fullmatch(row) for row in rows) \
            or len({len(row.split()) for row in rows}) != 1:
        return text
    return "Matrix([" + ", ".join(_numpy_array(row) for row in rows) + "])"


def _dotted(node: ast.expr) -> str:
    """`Interval.open` from its attribute nodes; only plain names qualify."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    raise _NotPrinted


def _constant(value: object) -> str:
    if isinstance(value, bool):
        return f"\\text{{{value}}}"  # Interval(0, 1, True, False): which ends are open
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        text = repr(value)
        if text in ("inf", "-inf", "nan"):
            raise _NotPrinted
        scientific = _FLOAT.fullmatch(text)
        if scientific:
            return f"{scientific.group(1)} \\cdot 10^{{{int(scientific.group(2))}}}"
        return text
    if isinstance(value, complex):
        imaginary = f"{_constant(value.imag)} i"
        if value.real == 0:
            return imaginary
        sign = "-" if value.imag < 0 else "+"
        return f"{_constant(value.real)} {sign} {_constant(abs(value.imag))} i"
    raise _NotPrinted


def _name(name: str) -> str:
    if name in _NAMES:
        latex = _NAMES[name]
        if latex is None:
            raise _NotPrinted
        return latex
    if name in _GREEK:
        return "\\" + name
    if len(name) == 1 and name.isalpha():
        return name
    indexed = _INDEXED.fullmatch(name)
    if indexed:
        return f"{indexed.group(1)}_{{{indexed.group(2)}}}"  # x1, x_1 -> x_{1}
    raise _NotPrinted


def _bracketed(left: str, low: str, high: str, right: str) -> str:
    """An interval; an infinite end is open whatever sympy's constructor said."""
    left = "(" if low == "-\\infty" else left
    right = ")" if high == "\\infty" else right
    return f"{left}{low}, {high}{right}"


def _interval(kind: str, written: list[str]) -> str:
    if kind not in _INTERVALS or len(written) != 2:
        raise _NotPrinted
    left, right = _INTERVALS[kind]
    return _bracketed(left, written[0], written[1], right)


def _closed_interval(written: list[str]) -> str:
    if len(written) == 2:
        return _bracketed("[", written[0], written[1], "]")
    if len(written) == 4 and set(written[2:]) <= {"\\text{True}", "\\text{False}"}:
        left = "(" if written[2] == "\\text{True}" else "["
        right = ")" if written[3] == "\\text{True}" else "]"
        return _bracketed(left, written[0], written[1], right)
    raise _NotPrinted


def _arity(count: int, make: Callable[[list[str]], str]) -> Callable[[list[str]], str]:
    def checked(written: list[str]) -> str:
        if len(written) != count:
            raise _NotPrinted
        return make(written)
    return checked


def _log(written: list[str]) -> str:
    if len(written) == 1:
        return f"\\ln{{\\left({written[0]}\\right)}}"
    if len(written) == 2:
        return f"\\log_{{{written[1]}}}{{\\left({written[0]}\\right)}}"
    raise _NotPrinted


_CALLS: dict[str, Callable[[list[str]], str]] = {
    "sqrt": _arity(1, lambda w: f"\\sqrt{{{w[0]}}}"),
    "cbrt": _arity(1, lambda w: f"\\sqrt[3]{{{w[0]}}}"),
    "root": _arity(2, lambda w: f"\\sqrt[{w[1]}]{{{w[0]}}}"),
    "Rational": _arity(2, lambda w: f"\\frac{{{w[0]}}}{{{w[1]}}}"),
    "Fraction": _arity(2, lambda w: f"\\frac{{{w[0]}}}{{{w[1]}}}"),
    "Integer": _arity(1, lambda w: w[0]),
    "exp": _arity(1, lambda w: f"e^{{{w[0]}}}"),
    "log": _log,
    "Abs": _arity(1, lambda w: f"\\left|{w[0]}\\right|"),
    "factorial": _arity(1, lambda w: f"\\left({w[0]}\\right)!"),
    "binomial": _arity(2, lambda w: f"\\binom{{{w[0]}}}{{{w[1]}}}"),
    "floor": _arity(1, lambda w: f"\\lfloor {w[0]} \\rfloor"),
    "ceiling": _arity(1, lambda w: f"\\lceil {w[0]} \\rceil"),
    "Interval": _closed_interval,
    "Union": lambda w: " \\cup ".join(w) if len(w) >= 2 else _fail(),
    "Intersection": lambda w: " \\cap ".join(w) if len(w) >= 2 else _fail(),
    "FiniteSet": lambda w: "\\{" + ", ".join(w) + "\\}",
    "Tuple": lambda w: "(" + ", ".join(w) + ")",
    # numpy 2 prints scalars with their type: `np.float64(2.0)`, `np.int64(3)`.
    **{f"np.{kind}": _arity(1, lambda w: w[0])
       for kind in ("float64", "float32", "float16", "int64", "int32", "int16", "int8",
                    "uint64", "uint32", "complex128", "bool_")},
}


def _fail() -> str:
    raise _NotPrinted
