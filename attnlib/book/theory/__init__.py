"""SymPy derivations the chapters display and the tests check.

One module per argument: ``variance`` (why the scale is 1/sqrt(d_k)) and
``softmax`` (what the scale does to softmax and its Jacobian). Import them
directly, e.g. ``from attnlib.book.theory import variance``.
"""
