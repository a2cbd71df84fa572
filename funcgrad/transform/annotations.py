"""The one declared vocabulary of AST annotations the passes share.

An annotation is an attribute one pass sets on an AST node for a later pass
to read. Every one is declared here, with the nodes that carry it, the pass
that sets it and what it means; passes read and write them only through
:func:`get`, :func:`put` and :func:`has`, never by spelling the attribute.
"""
from __future__ import annotations

__all__ = ["get", "put", "has", "PRIM", "CUSTOM", "NONDIFF", "SRC", "FILE", "COMMENT", "COUNTER", "IN_LOOP",
           "SAVED", "MARKER", "AUGMENTED", "CHECKPOINT", "SNAPSHOT", "RERUN", "AUTO",
           "TRIPS", "WRITE_BACK", "ANNOTATIONS"]

# name               attribute                  carried by        set by      meaning
PRIM = "_funcgrad_prim"          # Call            normalize   the Primitive this call applies
CUSTOM = "_funcgrad_custom"      # Call            normalize   the custom_vjp function this call applies
NONDIFF = "_funcgrad_nondiff"    # Call            normalize   the function of a call kept as is (no rule)
SRC = "_funcgrad_src"            # Call, Assign    normalize   (file, line) of the user's expression
FILE = "_funcgrad_file"          # stmt            normalize   the user's file (with lineno: errors at file:line)
COMMENT = "_funcgrad_comment"    # stmt            reverse     trailing comment: the primal statement undone
COUNTER = "_funcgrad_counter"    # For, While      reverse     the name counting the loop's trips
IN_LOOP = "_funcgrad_in_loop"    # For, While      reverse     the loop runs inside another loop
SAVED = "_funcgrad_saved"        # Assign x[i]=v   reverse     the name holding the elements it overwrites
MARKER = "_funcgrad_marker"      # Expr            reverse     where a taped name's earlier value is restored
AUGMENTED = "_funcgrad_augmented"  # Assign x = x+v normalize, anf  from ``x += v``: in place when x is an array
CHECKPOINT = "_funcgrad_checkpoint"  # For, While   normalize   checkpoint this loop: segment length (0: automatic)
SNAPSHOT = "_funcgrad_snapshot"  # If              reverse     a checkpointed loop's snapshot of its carried state
RERUN = "_funcgrad_rerun"        # Expr            reverse     where a segment of a checkpointed loop is re-run taped
AUTO = "_funcgrad_auto"          # If              reverse     checkpoint_loops: the taped copy of a loop (body) or
                                 #                             the checkpointed one (orelse), on the decision's name
TRIPS = "_funcgrad_trips"        # Expr            reverse     the push of an inner loop's trip count on its tape
WRITE_BACK = "_funcgrad_write_back"  # Assign x[..]  aliases   names B of a write through the view x = B[i]
                                 #                             written back right after it (B[i] = x)

ANNOTATIONS = (PRIM, CUSTOM, NONDIFF, SRC, FILE, COMMENT, COUNTER, IN_LOOP, SAVED, MARKER, AUGMENTED, CHECKPOINT,
               SNAPSHOT, RERUN, AUTO, TRIPS, WRITE_BACK)


def get(node, annotation, default=None):
    return getattr(node, annotation, default)


def put(node, annotation, value):
    setattr(node, annotation, value)
    return node


def has(node, annotation) -> bool:
    return hasattr(node, annotation)
