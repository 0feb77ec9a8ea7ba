"""Running what transformer.py compiled: the hooks go in as arguments, never through a
namespace.

`run_module(code, namespace, guards)` makes the module's function (its globals are the
run's namespace, whose `__builtins__` is reset to the guarded table first) and calls it
with the guards' hooks; `evaluate(code, namespace, guards)` does the same for an
expression and returns its value. These are the policy's only two ways in; the audit
hook trusts them by the identity of their code. Stdlib only.
"""

from __future__ import annotations

import types
from functools import partial
from typing import Any

from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence

from .builtins import MODULE_CODE_NAME, PrintToStdout
from .guards import Guards, inplacevar
from .transformer import EXPRESSION_CODE_NAME, HOOK_NAMES


def hook_values(guards: Guards, namespace: dict[str, Any]) -> tuple[Any, ...]:
    """The hooks, in the order of HOOK_NAMES."""
    values = {
        "_getattr_": guards.getattr, "_getitem_": guards.getitem, "_getiter_": guards.getiter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence, "_write_": guards.write,
        "_print_": PrintToStdout, "_inplacevar_": inplacevar,
        "_inplace_attr_": guards.inplace_attr, "_inplace_item_": guards.inplace_item,
        "_apply_": guards.apply, "_result_": guards.check_result,
        "_annotation_": guards.annotation, "_enter_": guards.enter,
        "_lambda_": guards.check_lambda_arguments,
        "_import_star_": partial(guards.import_star, namespace), "__metaclass__": type,
        # `_plain_`: the classes whose every instance may be held (the plain types among
        # them), a set that grows as the value check judges classes.
        "_type_": type, "_plain_": guards.values.held, "_decorate_": guards.decorate,
        "_with_": guards.with_, "_attribute_": guards.attribute,
        "_method_": types.MethodType, "_bound_": guards.values.bound,
    }
    return tuple(values[name] for name in HOOK_NAMES)


def new_namespace(guards: Guards) -> dict[str, Any]:
    """A fresh namespace for one run (or one session) of user code: no hook in it."""
    return {"__builtins__": guards.builtins_table(), "__name__": "__main__"}


def _function_code(code: types.CodeType, name: str) -> types.CodeType:
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType) and constant.co_name == name:
            return constant
    raise TypeError(f"not code compiled by the restricted policy (no {name} in it)")


def run_module(code: types.CodeType, namespace: dict[str, Any], guards: Guards) -> None:
    """Run a module's code (compile_user_code) in `namespace`."""
    # Whatever a run before this one did to the namespace, the code starts with the
    # guarded builtins (functions it makes take theirs from here).
    namespace["__builtins__"] = guards.builtins_table()
    module = types.FunctionType(_function_code(code, MODULE_CODE_NAME), namespace)
    module(*hook_values(guards, namespace))


def evaluate(code: types.CodeType, namespace: dict[str, Any], guards: Guards) -> Any:
    """The value of an expression's code (compile_user_expression) in `namespace`."""
    namespace["__builtins__"] = guards.builtins_table()
    expression = types.FunctionType(_function_code(code, EXPRESSION_CODE_NAME), namespace)
    return expression(*hook_values(guards, namespace))
