"""Every known library sink, one row each: a callable that turns a name or an object the
caller chose into code, an attribute read, a callback, a class, an import, or a write
into a namespace; what it would reach; how the restricted policy closes it; and the test
that attacks it (a function of tests/test_policy_sinks.py with the real object the
library hands out). tests/test_policy_sinks.py fails when a row has no attack test, or
an attack test names no row. The README's security section links here.

How a sink is closed:
- `patched`: the library's function is replaced, in the worker, by one that does the
  same under the policy (policy/libraries/sympy.py);
- `refused`: the callable or module cannot be reached or called (with the reason);
- `substituted`: user code gets a guarded stand-in instead (policy/guards.py);
- `mechanism`: the generic rules already close it (the value check on entry, on results
  and on iteration; hooks as parameters; refused string annotations);
- `worker`: it runs once in the worker, before any child exists.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sink:
    callable: str
    reaches: str
    closed_by: str
    how: str
    test: str


SINKS: tuple[Sink, ...] = (
    # -- sympy: strings and generated code ----------------------------------------------
    Sink("sympy.parsing.sympy_parser.parse_expr (sympify, S of a string)",
         "eval of text with the real builtins and sympy's namespace", "patched",
         "compiled under the policy, evaluated with the hooks as arguments",
         "test_sink_parse_expr_runs_text_under_the_policy"),
    Sink("parse_expr(local_dict=..., global_dict=...)",
         "names in the evaluation's namespace, hooks included", "patched",
         "both dicts filtered (no '_' names, values checked); hooks are never names",
         "test_sink_parse_expr_dicts_cannot_replace_the_hooks"),
    Sink("sympy.utilities.lambdify.lambdify",
         "exec of printed source; import lines from its module tables", "patched",
         "source compiled under the policy; import lines parsed and carried out here",
         "test_sink_lambdify_runs_its_code_under_the_policy"),
    Sink("lambdify(printer=...) with module_imports",
         "import lines of the printer's choosing", "patched",
         "only `import M`, `from M import names` and `a = M.a` of public names of math, cmath, "
         "mpmath and sympy", "test_sink_lambdify_printer_imports_are_parsed"),
    Sink("sympy.polys.monomials.MonomialOps._build",
         "exec of generated text (a subclass could write it)", "patched",
         "MonomialOps itself only; the text must parse to tuple arithmetic; the tree is compiled",
         "test_sink_monomial_builder_runs_only_arithmetic"),
    Sink("sympy.abc", "exec of `from sympy import *` at import", "worker",
         "imported in the worker, before any child", "test_sink_sympy_abc_is_imported_ahead"),
    # -- sympy: names and callbacks -----------------------------------------------------
    Sink("sympy.printing.printer.Printer._print",
         "getattr(expr, self.printmethod) with the real getattr", "patched",
         "printmethod read as sympy reads it, a plain '_name' only",
         "test_sink_printer_calls_only_print_methods"),
    Sink("sympy.solvers.solvers.findroot (nsolve(solver=...))",
         "mpmath calls a callable solver with its own context object", "patched",
         "solver= must be the name of one of mpmath's solvers",
         "test_sink_findroot_takes_only_named_solvers"),
    Sink("sympy.core.decorators.call_highest_priority",
         "calls an attribute the caller names on any object", "refused",
         "refused by identity, with the reason", "test_sink_attribute_callers_are_refused"),
    Sink("sympy.parsing.sympy_parser.AppliedFunction",
         "its __getitem__ is getattr(self, self.items[i]) with the real getattr", "refused",
         "refused by identity, with the reason", "test_sink_attribute_callers_are_refused"),
    Sink("sympy.core.operations.AssocOpDispatcher",
         "operator.attrgetter over a dotted path built from the caller's name", "refused",
         "refused by identity, with the reason", "test_sink_attribute_callers_are_refused"),
    Sink("sympy.strategies.branch.traverse.basic_fns (and any value that is the real type)",
         "the real `type`: three arguments make a class without a class statement's checks",
         "refused", "the real type refused by identity wherever it appears",
         "test_sink_class_factories_are_refused"),
    Sink("sympy's decorators (threaded, xthreaded, memoize_property, deprecated, ...)",
         "the real functools.wraps copies a user function's __dict__ and __module__ onto a "
         "library closure", "mechanism", "a function counts as the user's own by its code "
         "(compiled under the policy), not its __module__; what the decorator returns is checked",
         "test_sink_library_decorators_make_nothing_the_users"),
    Sink("sympy.core.symbol.var (sympy.var)",
         "writes into the caller's globals under names it chooses", "refused",
         "refused by identity; symbols() instead",
         "test_sink_namespace_writers_are_refused"),
    Sink("sympy.utilities.magic.pollute",
         "writes into its caller's caller's globals", "refused",
         "its module is not among the allowed subpackages",
         "test_sink_namespace_writers_are_refused"),
    Sink("sympy.multipledispatch.dispatch",
         "reads the caller's frame locals under the decorated function's name", "mechanism",
         "a module's top level is a function whose only locals are the hooks: the library "
         "finds our own guarded functions there, and what it returns is checked",
         "test_sink_dispatch_finds_nothing_of_the_callers"),
    Sink("sympy.core.sympify.converter (a user function registered for a class)",
         "sympify calls it with whatever it converts", "mechanism",
         "arguments are checked as the user function starts",
         "test_sink_library_callbacks_check_their_arguments"),
    Sink("sympy.core.function.UndefinedFunction (Function(name, bases, namespace))",
         "a class built from bases and a namespace the caller chose", "patched",
         "a name and assumptions only", "test_sink_class_factories_are_refused"),
    # -- sympy: attribute names built from caller data ----------------------------------
    # (Audited: every getattr/setattr/delattr/hasattr/attrgetter in the allowed subpackages
    # whose name is not a constant. Not rows: names with a fixed prefix ('_print_',
    # 'is_', '_eval_is_', 'from_', '_eval_rewrite_as_'), which cannot reach a dunder or
    # another prefix; names from sympy's own tables, slots and class statements; reads
    # whose value is not handed on.)
    Sink("sympy.utilities.decorator.memoize_property (also sympy.memoize_property)",
         "getattr and setattr of '_' + f.__name__ (any name: the run sets __name__) on any "
         "object its getter is given, sympy's classes included", "patched",
         "the name a plain identifier read once; the cached attribute read and written "
         "through the guards (the user's own objects only)",
         "test_sink_memoize_property_reaches_only_the_users_attributes"),
    Sink("sympy.assumptions.ask.register_handler, remove_handler",
         "getattr and setattr on sympy's shared Q under the caller's key", "refused",
         "refused by identity, with the reason", "test_sink_attribute_callers_are_refused"),
    Sink("PolyRing, FracField, FreeGroup (ring, field, free_group), CoordSys3D",
         "setattr of each generator (vector, variable) under a name the caller chose onto the "
         "object made (FreeGroup overwrites what it has)", "patched",
         "names starting with '_' refused before anything is made",
         "test_sink_generator_names_write_no_internals"),
    Sink("sympy.physics.quantum.qasm.Qasm",
         "getattr(self, command)(*rest) with the command from the caller's text", "patched",
         "commands must be public names", "test_sink_qasm_calls_only_public_commands"),
    # -- wrappers and C iteration -------------------------------------------------------
    Sink("functools.partial, partialmethod, staticmethod, classmethod, property, "
         "cached_property, lru_cache/cache wrappers, map/filter/itertools objects, "
         "iter(f, stop) (a callable_iterator), functools.wraps-made library functions",
         "calls what they wrap: judged by their own class, partial(<real getattr>) passed",
         "mechanism", "judged by what they wrap (policy/wrappers.py): every part checked, "
         "a wrapper of anything refused or substituted refused",
         "test_sink_wrappers_are_judged_by_what_they_wrap"),
    Sink("map, filter, sorted/min/max(key=), iter(f, stop), functools.reduce, "
         "functools.cmp_to_key, itertools.starmap, filterfalse, takewhile, dropwhile, "
         "accumulate, groupby",
         "values one library callable returns handed to the next in C, never checked",
         "substituted", "stand-ins whose C iteration calls the function through CheckedCall: "
         "every argument and result checked (policy/plumbing.py); the real ones substituted "
         "wherever they appear", "test_sink_c_iteration_checks_what_crosses_it"),
    # -- sympy: modules and packages ----------------------------------------------------
    Sink("sympy.core.cache", "the cache every sympy call shares (clear_cache, cacheit)",
         "refused", "refused module", "test_sink_refused_modules"),
    Sink("sympy.printing.preview", "LaTeX and viewers run as processes", "refused",
         "refused module", "test_sink_refused_modules"),
    Sink("sympy.printing.llvmjitcode", "compiles and loads machine code", "refused",
         "refused module", "test_sink_refused_modules"),
    Sink("sympy.printing.aesaracode, theanocode, tensorflow",
         "code built for other libraries, imported by name", "refused", "refused modules",
         "test_sink_refused_modules"),
    Sink("sympy.physics.secondquant", "eval of strings with the real builtins", "refused",
         "refused module", "test_sink_refused_modules"),
    Sink("sympy.polys.polyconfig", "sympy's global configuration", "refused",
         "refused module", "test_sink_refused_modules"),
    Sink("sympy.stats.sampling", "imports numpy, scipy and pymc by name", "refused",
         "refused module", "test_sink_refused_modules"),
    Sink("mpmath (identify, plot, contexts)", "eval in identify; matplotlib; private state",
         "refused", "values may be held, mpmath not imported, its classes not subclassed, its "
         "private names not read", "test_sink_mpmath_values_open_no_way_out"),
    # -- the standard library -----------------------------------------------------------
    Sink("functools.update_wrapper, functools.wraps",
         "reads attributes the caller names (the real getattr) into the wrapper", "substituted",
         "a stand-in copies the standard attributes, each checked",
         "test_sink_update_wrapper_copies_only_checked_attributes"),
    Sink("str.format, str.format_map, string.Formatter, UserString.format",
         "attribute and item lookups in the field names", "mechanism",
         "a formatter whose lookups go through the guards",
         "test_sink_format_strings_use_the_guards"),
    Sink("super(S, s).format (S a str subclass), a bound str.format or UserString.format "
         "from any route (a library's attribute, C iteration)",
         "the real str.format: the receiver of the read is a super proxy, not a str",
         "substituted", "decided by the value: a bound format/format_map of a str (or "
         "UserString) and the methods of the class are the guarded stand-ins",
         "test_sink_bound_format_is_guarded_by_its_value"),
    Sink("type(name, bases, namespace), metaclasses (EnumType, sympy's own)",
         "classes without a class statement's checks", "refused",
         "three-argument type() and metaclass values refused",
         "test_sink_class_factories_are_refused"),
    Sink("enum.Enum('E', namespace, type=..., module=...)", "classes built from a namespace",
         "refused", "enum is not allowed (its members from allowed modules are values)",
         "test_sink_class_factories_are_refused"),
    Sink("typing.get_type_hints (functools.singledispatch)", "eval of string annotations",
         "mechanism", "string annotations refused when compiling, and at run time",
         "test_sink_string_annotations_are_refused"),
    Sink("collections.namedtuple", "exec of a class template filled with names", "mechanism",
         "a trusted compile site of the audit hook; namedtuple accepts identifiers only",
         "test_sink_namedtuple_takes_only_identifiers"),
    Sink("operator.attrgetter, operator.methodcaller, importlib.import_module, and the real "
         "getattr, setattr, eval, exec, compile, open, __import__, globals, locals, vars",
         "any attribute, any import, code from strings, files", "refused",
         "refused by identity, and as builtins", "test_sink_dangerous_callables_are_refused"),
    Sink("C code's lazy imports through a frame's builtins (datetime.strftime -> time)",
         "an import by name outside the allowlist", "mechanism",
         "only the fixed list of lazy imports, and what comes back is checked",
         "test_sink_lazy_imports_hand_out_nothing"),
    Sink("json.tool", "reads and writes files", "refused", "refused module",
         "test_sink_refused_modules"),
)
