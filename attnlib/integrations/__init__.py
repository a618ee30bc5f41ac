"""Adapters that plug attnlib into other libraries.

Each adapter is its own module and imports the library it adapts to; nothing
here is imported by ``import attnlib``, so attnlib never needs them installed.
"""
