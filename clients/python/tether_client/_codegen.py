"""Writes `tether_client/models.py` from Tether's OpenAPI schema, so the models
cannot drift from the server: Tether's suite regenerates the file from the
schema the server serves and fails when it differs from the one committed
(tests/clients/test_models_match_schema.py).

    python -m tether_client._codegen schema.json > tether_client/models.py

Only the components the client returns (ROOTS) and what they refer to are
written, as pydantic models that keep fields the schema does not know yet
(`extra="allow"`): a newer server adds fields without breaking an older client.
An enum is a plain `str` with its values as a tuple constant, for the same
reason: a status added on the server does not make a response unreadable.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from typing import Any

# What the client's calls return (tether_client._operations).
ROOTS = (
    "Task", "TaskDetail", "TaskPage", "Event", "EventPage", "Step", "StepPage",
    "Approval", "ApprovalPage", "Question", "QuestionPage", "Inbox", "Tool", "Agent", "Error",
)
HEADER = '''"""Tether's API models, generated from its OpenAPI schema by
`python -m tether_client._codegen`; do not edit by hand (see that module)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict{field}


class Model(BaseModel):
    """Fields the schema does not list yet are kept, not refused."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
'''
REF = "#/components/schemas/"
RESERVED = set(dir(object)) | {"model_config", "model_fields", "copy", "dict", "json", "schema"}


def _ref_name(ref: str) -> str:
    if not ref.startswith(REF):
        raise ValueError(f"unsupported $ref {ref!r}")
    return ref[len(REF):]


def _constant(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


class Generator:
    def __init__(self, schema: dict[str, Any]) -> None:
        self.components: dict[str, Any] = schema["components"]["schemas"]
        self.models: list[str] = []  # in dependency order
        self.enums: dict[str, list[Any]] = {}
        self._seen: set[str] = set()

    def is_enum(self, name: str) -> bool:
        return "enum" in self.components[name]

    def type_of(self, prop: dict[str, Any]) -> str:
        """The Python annotation of a property (without its nullability)."""
        if "$ref" in prop:
            return self.named(_ref_name(prop["$ref"]))
        if "allOf" in prop and len(prop["allOf"]) == 1:
            return self.type_of(prop["allOf"][0])
        if "oneOf" in prop or "anyOf" in prop:
            options: list[dict[str, Any]] = prop.get("oneOf") or prop.get("anyOf") or []
            names = [_ref_name(o["$ref"]) for o in options if "$ref" in o]
            if names and len(names) == len(options) and all(map(self.is_enum, names)):
                for name in names:
                    self.named(name)
                return "str"
            return "Any"
        if "enum" in prop:
            return "str"
        kind = prop.get("type")
        if kind == "integer":
            return "int"
        if kind == "number":
            return "float"
        if kind == "boolean":
            return "bool"
        if kind == "string":
            return "datetime" if prop.get("format") == "date-time" else "str"
        if kind == "array":
            return f"list[{self.type_of(prop.get('items') or {})}]"
        if kind == "object" and "properties" not in prop:
            values = prop.get("additionalProperties")
            inner = self.type_of(values) if isinstance(values, dict) and values else "Any"
            return f"dict[str, {inner}]"
        return "Any"

    def named(self, name: str) -> str:
        """The type of component NAME, writing it first when it is a model."""
        component = self.components[name]
        if "enum" in component:
            self.enums[name] = [v for v in component["enum"] if v is not None]
            return "str"
        if name not in self._seen:
            self._seen.add(name)
            self.models.append(self.model(name, component))
        return name

    def base_of(self, component: dict[str, Any]) -> str | None:
        """A model already written whose fields this one repeats, the largest: the
        serializer extends that one's (TaskDetail is a Task), and so does the model."""
        props, required = component.get("properties") or {}, set(component.get("required") or ())
        best: tuple[int, str] | None = None
        for name in sorted(self._seen):
            other = self.components[name]
            theirs = other.get("properties") or {}
            if (theirs and len(theirs) < len(props)
                    and all(props.get(k) == v for k, v in theirs.items())
                    and set(other.get("required") or ()) == required & set(theirs)
                    and (best is None or len(theirs) > best[0])):
                best = (len(theirs), name)
        return best[1] if best else None

    def model(self, name: str, component: dict[str, Any]) -> str:
        required = set(component.get("required") or ())
        base = self.base_of(component)
        inherited = set(self.components[base].get("properties") or ()) if base else set()
        lines = [f"class {name}({base or 'Model'}):"]
        for field, prop in (component.get("properties") or {}).items():
            if field in inherited:
                continue
            annotation = self.type_of(prop)
            nullable = prop.get("nullable") or annotation == "Any"
            if nullable and annotation != "Any":
                annotation += " | None"
            attr, alias = field, None
            if keyword.iskeyword(field) or field in RESERVED:
                attr, alias = field + "_", field
            if field in required:
                default = f" = Field(alias={alias!r})" if alias else ""
            elif annotation == "Any" or annotation.endswith("| None"):
                default = f" = Field(None, alias={alias!r})" if alias else " = None"
            else:
                annotation += " | None"
                default = f" = Field(None, alias={alias!r})" if alias else " = None"
            lines.append(f"    {attr}: {annotation}{default}")
        if len(lines) == 1:
            lines.append("    pass")
        return "\n".join(lines)


def generate(schema: dict[str, Any]) -> str:
    gen = Generator(schema)
    for root in ROOTS:
        gen.named(root)
    uses_field = any("Field(" in model for model in gen.models)
    constants = "\n".join(
        f"{_constant(name)}: tuple[str, ...] = (\n"
        + "".join(f"    {json.dumps(v)},\n" for v in gen.enums[name]) + ")"
        for name in sorted(gen.enums))
    parts = [HEADER.format(field=", Field" if uses_field else ""), constants + "\n",
             *(model + "\n" for model in gen.models)]
    return "\n\n".join(parts)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tether_client._codegen SCHEMA.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        sys.stdout.write(generate(json.load(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
