"""Walks the parsed XML: checks element names, expands `${ENV}`, converts values, collects errors.

Nothing here raises for a mistake in the file: every problem is recorded with its element path so
the loader can report all of them at once. Paths look like `AMPSConfig/SOW/Queue[2]/LeasePeriod`;
repeatable elements carry a 1-based index among siblings with the same tag.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from xml.etree.ElementTree import Element

from amps.config.model import RawElement
from amps.config.units import expand_env
from amps.errors import ConfigError, FilterSyntaxError

T = TypeVar("T")
ExpressionCheck = Callable[[str, str], None]


@dataclass(slots=True)
class Children:
    """The child elements of one container, grouped by canonical name (synonyms folded)."""

    path: str
    found: dict[str, list[tuple[str, Element]]] = field(default_factory=dict)

    def one(self, name: str) -> tuple[str, Element] | None:
        hits = self.found.get(name)
        return hits[0] if hits else None

    def many(self, name: str) -> list[tuple[str, Element]]:
        return self.found.get(name, [])

    def has(self, name: str) -> bool:
        return name in self.found


@dataclass(slots=True)
class Reader:
    """Error collector and value reader shared by every section parser."""

    env: Mapping[str, str]
    check_expression: ExpressionCheck | None = None
    errors: list[ConfigError] = field(default_factory=list)

    def error(self, path: str, value: str | None, expected: str) -> None:
        self.errors.append(ConfigError(path, value, expected))

    def children(
        self,
        element: Element,
        path: str,
        single: Iterable[str] = (),
        repeated: Iterable[str] = (),
        synonyms: Mapping[str, str] | None = None,
    ) -> Children:
        """Group `element`'s children; unknown, duplicated or attribute-bearing ones are errors."""
        single_names = tuple(single)
        repeated_names = tuple(repeated)
        synonym_map = dict(synonyms or {})
        allowed = (*single_names, *repeated_names, *synonym_map)
        result = Children(path)
        self._no_attributes(element, path)
        if (element.text or "").strip():
            self.error(path, element.text.strip() if element.text else "", "child elements only")
        seen_tags: dict[str, int] = {}
        for child in element:
            tag = str(child.tag)
            seen_tags[tag] = seen_tags.get(tag, 0) + 1
            canonical = synonym_map.get(tag, tag)
            child_path = f"{path}/{tag}"
            if canonical in repeated_names:
                child_path = f"{child_path}[{seen_tags[tag]}]"
            if (child.tail or "").strip():
                self.error(path, (child.tail or "").strip(), "child elements only")
            if canonical not in single_names and canonical not in repeated_names:
                self.error(child_path, tag, "an element named one of " + ", ".join(allowed))
                continue
            if canonical in single_names and canonical in result.found:
                first = result.found[canonical][0][0]
                shown = (child.text or "").strip() if not len(child) else tag
                self.error(child_path, shown, f"at most one {canonical} (already given at {first})")
                continue
            result.found.setdefault(canonical, []).append((child_path, child))
        return result

    def _no_attributes(self, element: Element, path: str) -> None:
        for name in element.attrib:
            self.error(path, name, "no XML attributes (AMPS configuration uses elements)")

    def text(self, path: str, element: Element) -> str | None:
        """The element's stripped, env-expanded text, or None (and an error) when unusable."""
        self._no_attributes(element, path)
        if len(element):
            self.error(path, None, "a value, not child elements")
            return None
        raw = (element.text or "").strip()
        try:
            expanded = expand_env(raw, self.env).strip()
        except ValueError as problem:
            self.error(path, raw, str(problem))
            return None
        if not expanded:
            self.error(path, raw, "a non-empty value")
            return None
        return expanded

    def value(self, children: Children, name: str, convert: Callable[[str], T], default: T) -> T:
        """The converted value of an optional child, `default` when absent or wrong."""
        hit = children.one(name)
        if hit is None:
            return default
        path, element = hit
        text = self.text(path, element)
        if text is None:
            return default
        try:
            return convert(text)
        except ValueError as problem:
            self.error(path, text, str(problem))
            return default

    def optional(self, children: Children, name: str, convert: Callable[[str], T]) -> T | None:
        """The converted value of an optional child, or None."""
        result: T | None = self.value(children, name, convert, None)
        return result

    def required(
        self, children: Children, name: str, convert: Callable[[str], T], expected: str
    ) -> T | None:
        """The converted value of a required child; a missing one is an error."""
        if not children.has(name):
            self.error(f"{children.path}/{name}", None, expected)
            return None
        return self.optional(children, name, convert)

    def path_of(self, children: Children, name: str) -> str:
        hit = children.one(name)
        return hit[0] if hit else f"{children.path}/{name}"

    def expression(self, children: Children, name: str, kind: str) -> str | None:
        """An expression child, checked through the injected hook when one is given."""
        text = self.optional(children, name, str)
        if text is not None and self.check_expression is not None:
            try:
                self.check_expression(text, kind)
            except FilterSyntaxError as problem:
                self.error(
                    self.path_of(children, name),
                    text,
                    f"a valid {kind} expression ({problem.detail} at column {problem.column})",
                )
        return text

    def raw(self, path: str, element: Element) -> RawElement:
        """Keep a reserved section as written, expanding env references in its text."""
        self._no_attributes(element, path)
        raw_text = (element.text or "").strip()
        try:
            text = expand_env(raw_text, self.env)
        except ValueError as problem:
            self.error(path, raw_text, str(problem))
            text = raw_text
        counts: dict[str, int] = {}
        kids: list[RawElement] = []
        for child in element:
            tag = str(child.tag)
            counts[tag] = counts.get(tag, 0) + 1
            kids.append(self.raw(f"{path}/{tag}[{counts[tag]}]", child))
        return RawElement(str(element.tag), text, tuple(kids))
