"""The demo job: what a math agent's code looks like going through the sandbox.

Each snippet is the kind of code block or function a model writes while solving a
problem: algebra with sympy, numpy and a file in the run's own directory, a plot saved as
a PNG, a finance helper, a function that fails, a loop that never ends, and a look around
for the host's files and programs, which are not there. Every run is logged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .backends.base import DEFAULT_BACKEND
from .sandbox import Sandbox
from .types import ExecutionResult, Limits


@dataclass(frozen=True)
class DemoSnippet:
    title: str
    code: str
    limits: Limits = field(default_factory=Limits)


SNIPPETS: tuple[DemoSnippet, ...] = (
    DemoSnippet("sympy algebra: roots, factoring, an integral", """\
from sympy import symbols, solve, factor, integrate, sin, Rational
x = symbols('x')
print("roots of x**2 - 5x + 6:", solve(x**2 - 5*x + 6, x))
print("factor x**4 - 1:", factor(x**4 - 1))
print("integral of x*sin(x):", integrate(x * sin(x), x))
print("1/3 + 1/6 =", Rational(1, 3) + Rational(1, 6))
"""),
    DemoSnippet("a compound-interest function, then a call", """\
def compound_principal(future_value, rate, years, periods=4):
    \"\"\"Principal needed today to reach future_value with compound interest.\"\"\"
    return future_value / (1 + rate / periods) ** (periods * years)

principal = compound_principal(1000, 0.05, 3)
print(f"principal needed: {principal:.2f}")
"""),
    DemoSnippet("MathChat style: compute, then answer in \\boxed{}", """\
from sympy import sympify, nsimplify
expr = sympify("sqrt(8) + sqrt(18)")
print(f"\\\\boxed{{{nsimplify(expr)}}}")
"""),
    DemoSnippet("numpy, and a CSV file written and read back in the run's own directory", """\
import csv, os
import numpy as np
rates = np.linspace(0.01, 0.05, 5)
with open("rates.csv", "w", newline="") as out:
    csv.writer(out).writerows([[f"{r:.2f}", f"{1000 * (1 + r) ** 10:.2f}"] for r in rates])
rows = list(csv.reader(open("rates.csv")))
print(len(rows), "rows in", os.getcwd(), "- at 5%:", rows[-1][1])
"""),
    DemoSnippet("a plot, saved as a PNG (matplotlib, no display)", """\
import matplotlib.pyplot as plt
figure, axes = plt.subplots()
axes.plot(range(10), [n * n for n in range(10)])
figure.savefig("squares.png")
print("squares.png:", open("squares.png", "rb").read(4))
"""),
    DemoSnippet("a function that fails (the model divides by an empty count)", """\
def average(values):
    return sum(values) / len(values)

print(average([3, 4, 5]))
print(average([]))
"""),
    DemoSnippet("an infinite loop, stopped by a 2 s limit", """\
n = 0
while True:
    n += 1
""", Limits(timeout_s=2)),
    DemoSnippet("looking for the host: its files and programs are not there", """\
import os, subprocess
print("the root holds:", sorted(os.listdir('/')))
subprocess.run(["cat", "/etc/passwd"])
"""),
)


def _summary(result: ExecutionResult) -> str:
    line = f"status={result.status} exit_code={result.exit_code} {result.duration_ms} ms"
    if result.error is not None:
        line += f"\n  {result.error.type}: {result.error.message}"
    return line


def run_demo(*, backend: str = DEFAULT_BACKEND, echo: Callable[[str], None] = print) -> list[ExecutionResult]:
    results = []
    with Sandbox(backend=backend, source="demo") as sandbox:
        echo(f"Running {len(SNIPPETS)} model-written snippets on the {backend} backend "
             f"(log: {sandbox.log_store.path if sandbox.log_store else 'off'})")
        for number, snippet in enumerate(SNIPPETS, 1):
            echo(f"\n[{number}/{len(SNIPPETS)}] {snippet.title}")
            echo("    " + snippet.code.rstrip("\n").replace("\n", "\n    "))
            result = sandbox.run(snippet.code, limits=snippet.limits)
            if result.stdout:
                echo("  stdout: " + result.stdout.rstrip("\n").replace("\n", "\n          "))
            echo("  " + _summary(result))
            results.append(result)
    return results
