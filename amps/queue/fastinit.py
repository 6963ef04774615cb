"""A cheaper `__init__` for the frozen, slotted event and action dataclasses (hot path).

A frozen dataclass's generated `__init__` calls `object.__setattr__(self, "name", value)` per
field, which costs about as much as the rest of an engine step. `speed_up(cls)` replaces it with
an equivalent `__init__` (same signature, same defaults, keyword or positional) that stores each
field through its slot descriptor. The class is unchanged otherwise: still frozen (assignment
after construction raises), slotted, comparable, hashable, and `dataclasses.replace` works.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def speed_up(cls: type[Any]) -> None:
    """Swap the dataclass `__init__` of a frozen, slotted dataclass for a faster equivalent."""
    params = dataclasses.fields(cls)
    assert cls.__dataclass_params__.frozen
    assert "__slots__" in cls.__dict__
    assert not hasattr(cls, "__post_init__")
    namespace: dict[str, Any] = {}
    signature: list[str] = ["self"]
    body: list[str] = []
    for field in params:
        assert field.init
        assert field.default_factory is dataclasses.MISSING
        namespace[f"_set_{field.name}"] = cls.__dict__[field.name].__set__
        if field.default is dataclasses.MISSING:
            signature.append(field.name)
        else:
            namespace[f"_default_{field.name}"] = field.default
            signature.append(f"{field.name}=_default_{field.name}")
        body.append(f"    _set_{field.name}(self, {field.name})")
    if not body:
        body.append("    pass")
    source = f"def __init__({', '.join(signature)}):\n" + "\n".join(body) + "\n"
    exec(source, namespace)  # generated from the dataclass fields above
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init
