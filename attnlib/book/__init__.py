"""The book's helpers: what the chapters, tests and assignments use around attnlib.

Plots, printing, diagrams, widgets and live figures; seeded data; the
stored benchmark results and training runs; the exercises and their
checkers; the SymPy derivations (``theory``); Monte Carlo estimates and
the measurements of trained models. None of it is needed by ``import
attnlib`` or its attention paths. It needs the ``book`` extra
(``pip install "attnlib[book]"``): NumPy, SymPy, SciPy, Matplotlib, tqdm
and ipywidgets. Import the modules by name, e.g.
``from attnlib.book import plots``.
"""
