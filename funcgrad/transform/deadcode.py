"""Dead-code removal in the adjoint: copies of a result value that no template read are dropped."""
from __future__ import annotations

import ast

from .astutil import drop_statements
from .astutil import ast_walk


def _drop_unused_new(code):
    """Remove ``_newN = v`` copies of a result value that no template read."""
    used = {n.id for n in ast_walk(ast.Module(body=code, type_ignores=[])) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}

    return drop_statements(code, lambda st: isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and
                           st.targets[0].id.startswith("_new") and st.targets[0].id not in used)
