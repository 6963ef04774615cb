"""A cheaper `__init__` for the frozen, slotted event and action dataclasses (hot path).

A frozen dataclass's generated `__init__` calls `object.__setattr__(self, "name", value)` per
field, which costs about as much as the rest of an engine step. `speed_up(*classes)` replaces
it with an equivalent `__init__` (same signature, same defaults, keyword or positional) that
stores each field through its slot descriptor. The class is unchanged otherwise: still frozen
(assignment after construction raises), slotted, comparable, hashable, and `dataclasses.replace`
works.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def speed_up(*classes: type[Any]) -> None:
    """Swap the dataclass `__init__` of frozen, slotted dataclasses for faster equivalents.

    The new `__init__`s are compiled together, one `exec` for all (each compile costs at import).
    """
    namespace: dict[str, Any] = {}
    source: list[str] = []
    for number, cls in enumerate(classes):
        assert cls.__dataclass_params__.frozen
        assert "__slots__" in cls.__dict__
        assert not hasattr(cls, "__post_init__")
        signature: list[str] = ["self"]
        body: list[str] = []
        for field in dataclasses.fields(cls):
            assert field.init
            assert field.default_factory is dataclasses.MISSING
            setter = f"_set_{number}_{field.name}"
            namespace[setter] = cls.__dict__[field.name].__set__
            if field.default is dataclasses.MISSING:
                signature.append(field.name)
            else:
                default = f"_default_{number}_{field.name}"
                namespace[default] = field.default
                signature.append(f"{field.name}={default}")
            body.append(f"    {setter}(self, {field.name})")
        if not body:
            body.append("    pass")
        source.append(f"def _init_{number}({', '.join(signature)}):\n" + "\n".join(body) + "\n")
    exec("\n".join(source), namespace)  # generated from the dataclass fields above
    for number, cls in enumerate(classes):
        init = namespace[f"_init_{number}"]
        init.__name__ = "__init__"
        init.__qualname__ = f"{cls.__qualname__}.__init__"
        init.__doc__ = cls.__init__.__doc__
        cls.__init__ = init
