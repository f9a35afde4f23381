"""Which standard-library modules the bytelm corpus is made of, and how to recognise their files.

The experiment must be able to read no copy of the corpus, and it has to read the Python it runs
on; so the corpus is made only of stdlib modules that it never needs: modules that Python's
start-up, torch (its compiler included), numpy and the harness do not import, that a training
recipe has no reason to import, and that no well-known package vendors a copy of (site-packages
stays readable whole). Left out for that reason: lib2to3 (black's blib2to3, fissix), distutils
(setuptools/_distutils), tomllib (tomli, in pip), _pydecimal (its docstring is decimal.py's
from 3.12), the modules PEP 594 removed (their standard-* copies on PyPI), and every module torch
or numpy imports somewhere (pdb, optparse, wave, sqlite3, ...).
"""

from __future__ import annotations

# Train and val both come from these; the sandbox denies each of them (readable_paths.py).
# Debian's python3.11 lacks idlelib, tkinter and turtledemo (packaged apart): the corpus is then
# smaller, with the same val split.
CORPUS_MODULES = (
    "idlelib",
    "tkinter",
    "turtledemo",
    "turtle",
    "pydoc_data",
    "pydoc",
    "doctest",
    "_pyio",
    "mailbox",
    "imaplib",
    "smtplib",
    "ftplib",
    "poplib",
    "xmlrpc",
    "wsgiref",
    "curses",
    "dbm",
    "ensurepip",
    "msilib",
)
# The val split: code (not pydoc_data's prose), present in every CPython layout (Debian's too)
# from 3.11 to 3.13, so machines differ only by their Python version's edits to these files.
VAL_MODULES = ("xmlrpc", "wsgiref", "curses", "dbm", "ensurepip", "msilib")


def corpus_module(entry: str) -> str | None:
    """The corpus module that an entry of a stdlib folder holds, else None: a package folder
    (`xmlrpc`), a module (`turtle.py`, or a legacy `turtle.pyc`), or in `__pycache__` its
    compiled form (`turtle.cpython-311.opt-1.pyc`)."""
    stem = entry.split(".", 1)[0]
    if stem in CORPUS_MODULES and (entry == stem or entry.endswith((".py", ".pyc"))):
        return stem
    return None
