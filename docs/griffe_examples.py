"""Griffe extension: the package's docstrings head their doctests `Example:`, which Google style (as griffe reads
it) knows only as `Examples:`; without this, the doctest lines would be rendered as Markdown prose."""

import re

import griffe

EXAMPLE_HEADING = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    def on_object(self, *, obj, **kwargs):  # noqa: ARG002 (griffe's hook signature)
        if obj.docstring is not None:
            obj.docstring.value = EXAMPLE_HEADING.sub(r"\1Examples:", obj.docstring.value)
