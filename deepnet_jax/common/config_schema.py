"""Config fields declared once: default, type, allowed values and a one-line comment.

A group of fields is a frozen dataclass whose fields are made by :func:`field` (each carries a
:class:`Spec` in its metadata). From a group the code derives the ``ml_collections`` defaults
(:func:`config_dict`), the checks (:func:`check_group`: unknown and missing fields, then each
field's type and range) and the reference docs (:func:`markdown_table`). Relations between
fields (``num_heads`` divides ``d_model``, …) stay with the code that owns them.

A field declared ``resumable=True`` may change when a run resumes from its checkpoints (a
cadence, a path, the mesh: how the run is carried out); every other field defines what is
trained, and a resumed run must keep it (:mod:`deepnet_jax.training.fingerprint`).

A field added after runs were saved declares ``before=``: the value that behaves as the code
did before the field existed (not necessarily its default), which a saved config lacking it is
read with (:func:`added`; ``deepnet_jax.training.config.ADDED_FIELDS`` gathers them).

A group's values as a frozen dataclass (:func:`typed`) and back (:func:`as_dict`): the declared
fields, plus a :func:`subgroup` (an undeclared sub-dict such as ``mesh.rules``) kept as given.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import ml_collections

KINDS = ("int", "float", "bool", "str", "choice", "increasing_ints")
FRACTION = {
    "low": 0,
    "high": 1,
    "high_open": True,
}  # a field's range [0, 1): field(..., **FRACTION)


class _Always:
    """The ``before`` of a field that every saved config has (declared from the start)."""

    def __repr__(self) -> str:
        return "ALWAYS"


ALWAYS = _Always()


@dataclasses.dataclass(frozen=True)
class Spec:
    """A field's kind (one of :data:`KINDS`), comment and allowed values: ``choices`` for
    ``choice``; an interval for numbers, ``low``/``high`` with ``low_open``/``high_open`` saying
    the bound itself is excluded. ``resumable``: the field may change when a run resumes.
    ``before``: the value that behaves as the code did before the field existed, for configs
    saved then (:data:`ALWAYS`: the field was there from the start)."""

    kind: str
    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] = ()
    resumable: bool = False
    before: Any = ALWAYS

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not allowed ("must be an integer >= 1", …), or None."""
        if self.kind == "choice":
            return None if value in self.choices else "allowed values are"
        if self.kind == "bool":
            return None if isinstance(value, bool) else "must be True or False"
        if self.kind == "str":
            return None if isinstance(value, str) else "must be a string"
        if self.kind == "increasing_ints":
            ok = isinstance(value, (tuple, list)) and all(_is_int(v) for v in value)
            ok = ok and all(a < b for a, b in itertools.pairwise(value))
            return None if ok else "must be strictly increasing integers"
        if self.kind == "int":
            return (
                None
                if _is_int(value) and self._in_range(value)
                else (f"must be an integer{self._range()}")
            )
        if not _is_number(value):
            return f"must be a number{self._range()}"
        return None if self._in_range(value) else f"must be{self._range()}"

    def _in_range(self, value: float) -> bool:
        low_ok = self.low is None or (value > self.low if self.low_open else value >= self.low)
        high_ok = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return low_ok and high_ok

    def _range(self) -> str:
        """`` >= 1``, `` > 0``, `` in [0, 1)``, …"""
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f" in {left}{_number(self.low)}, {_number(self.high)}{right}"
        if self.low is not None:
            return f" {'>' if self.low_open else '>='} {_number(self.low)}"
        if self.high is not None:
            return f" {'<' if self.high_open else '<='} {_number(self.high)}"
        return ""

    def allowed(self) -> str:
        """The allowed values in words, for the docs."""
        if self.kind == "choice":
            return ", ".join(f"`{c!r}`" for c in self.choices)
        names = {"bool": "True, False", "str": "text", "increasing_ints": "increasing integers"}
        return names.get(
            self.kind, f"{'integer' if self.kind == 'int' else 'number'}{self._range()}"
        )


def field(default: Any, doc: str, kind: str | None = None, **spec: Any) -> Any:
    """A dataclass field with its default and :class:`Spec` (``kind`` inferred from the
    default when omitted: bool, int, float or str; ``choices`` makes it ``choice``). A
    ``before`` value (see :class:`Spec`) must be one the field allows."""
    if kind is None:
        kind = "choice" if "choices" in spec else _kind_of(default)
    if "choices" in spec:
        spec["choices"] = tuple(spec["choices"])
    declared = Spec(kind, doc, **spec)
    if declared.before is not ALWAYS and declared.problem(declared.before) is not None:
        raise TypeError(f"before={declared.before!r} is not a value of the field ({doc!r})")
    metadata = {"spec": declared}
    if isinstance(default, (list, tuple)):
        return dataclasses.field(default_factory=lambda: tuple(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def subgroup(doc: str) -> Any:
    """A dataclass field holding an undeclared sub-dict of its group (``mesh.rules``: logical
    axis → mesh axes), checked by the group's own code: its ``(key, value)`` pairs as given,
    or None when the config has none. :func:`typed` fills it, :func:`as_dict` writes it back."""
    return dataclasses.field(default=None, metadata={"subgroup": doc})


def _declared(group: type) -> list[dataclasses.Field]:
    """The group's config fields (dataclass fields made by :func:`field`)."""
    return [f for f in dataclasses.fields(group) if "spec" in f.metadata]


def specs(group: type) -> dict[str, Spec]:
    """Each config field's :class:`Spec`, in declaration order."""
    return {f.name: f.metadata["spec"] for f in _declared(group)}


def resumable(group: type) -> list[str]:
    """The group's fields declared ``resumable=True``, in declaration order."""
    return [name for name, spec in specs(group).items() if spec.resumable]


def added(group: type) -> dict[str, Any]:
    """The group's fields declared with a ``before`` value (added after runs were saved), each
    with that value, in declaration order."""
    return {name: spec.before for name, spec in specs(group).items() if spec.before is not ALWAYS}


def defaults(group: type) -> dict[str, Any]:
    """Each config field's default, in declaration order."""
    return {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in _declared(group)
    }


def config_dict(group: type) -> ml_collections.ConfigDict:
    """The group's defaults as a ``ConfigDict`` (what configs start from)."""
    return ml_collections.ConfigDict(defaults(group))


def typed(group: type, values: Any, prefix: str = "", **extra: Any) -> Any:
    """The frozen dataclass ``group`` holding ``values`` (a dict or ``ConfigDict`` of the
    group, its values already checked): every declared field (a list, as JSON gives a tuple
    back, made a tuple again), each :func:`subgroup` that ``values`` has, and ``extra`` (fields
    that are not the group's config fields, such as ``DataOptions.seed``). A declared field
    missing is one error naming it (``prefix`` its group's)."""
    kwargs = dict(extra)
    for f in dataclasses.fields(group):
        if "spec" in f.metadata:
            if f.name not in values:
                raise ValueError(f"config field {prefix}{f.name} is missing")
            value = values[f.name]
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
        elif "subgroup" in f.metadata and values.get(f.name) is not None:
            sub = values[f.name]
            kwargs[f.name] = tuple((sub.to_dict() if hasattr(sub, "to_dict") else sub).items())
    return group(**kwargs)


def as_dict(value: Any) -> dict[str, Any]:
    """The config group a :func:`typed` dataclass holds, as a plain dict: its declared fields
    and its subgroups (a dict again; left out when None), names in sorted order at each level,
    as ``ConfigDict.to_dict()`` gives them."""
    out = {}
    for f in dataclasses.fields(value):
        if "spec" in f.metadata:
            out[f.name] = getattr(value, f.name)
        elif "subgroup" in f.metadata and getattr(value, f.name) is not None:
            out[f.name] = dict(sorted(getattr(value, f.name)))
    return dict(sorted(out.items()))


def check_names(
    config: Any,
    names: Sequence[str],
    prefix: str,
    missing_ok: bool = False,
    start: str = "base.get_config",
) -> None:
    """One error for the first field of ``config`` not in ``names`` (a typo), then (unless
    ``missing_ok``) the first of ``names`` it lacks, saying to ``start`` from the defaults."""
    where = prefix.rstrip(".") or "the config"
    for name in sorted(config.keys()):
        if name not in names:
            raise ValueError(
                f"unknown config field {prefix}{name}; the fields of {where} are "
                f"{', '.join(sorted(names))}"
            )
    for name in [] if missing_ok else names:
        if name not in config:
            raise ValueError(f"config field {prefix}{name} is missing (start from {start})")


def check_values(
    config: Any, group: type, prefix: str, style: str = "plain", skip: Sequence[str] = ()
) -> None:
    """One error for the first field of ``config`` (but those in ``skip``) whose value its
    :class:`Spec` refuses.

    ``style`` words it: ``"plain"`` — ``optimizer.name='sgd'; allowed values are ('adamw',)``,
    ``total_steps=0 must be an integer >= 1``; ``"invalid"`` (the model's) —
    ``model.arch='gpt' is invalid: allowed values are 'encoder', 'decoder', 'encdec'``.
    """
    for name, spec in specs(group).items():
        if name in skip:
            continue
        value = config[name]
        reason = spec.problem(value)
        if reason is not None:
            raise ValueError(message(f"{prefix}{name}", value, reason, spec, style))


def check_group(config: Any, group: type, prefix: str, style: str = "plain") -> None:
    """:func:`check_names` then :func:`check_values`."""
    check_names(config, list(specs(group)), prefix)
    check_values(config, group, prefix, style)


def message(path: str, value: Any, reason: str, spec: Spec, style: str = "plain") -> str:
    """The one-line error for ``path=value`` (see :func:`check_values`)."""
    if style == "invalid":
        if spec.kind == "choice":
            reason = "allowed values are " + ", ".join(map(repr, spec.choices))
        return f"{path}={value!r} is invalid: {reason}"
    if spec.kind == "choice":
        return f"{path}={value!r}; allowed values are {spec.choices!r}"
    return f"{path}={value!r} {reason}"


def markdown_table(group: type, prefix: str, overrides: Mapping[str, Any] | None = None) -> str:
    """| field | default | allowed | on resume | meaning | rows of the group, for
    docs/config.md (on resume: "may change" for a resumable field, else "kept"). A default in
    ``overrides`` (keyed by the dotted path) is shown instead of the declaration's."""
    rows = ["| field | default | allowed | on resume | meaning |", "|---|---|---|---|---|"]
    for (name, spec), default in zip(specs(group).items(), defaults(group).values(), strict=True):
        default = (overrides or {}).get(prefix + name, default)
        shown = f"`{default!r}`".replace("|", "\\|")
        resume = "may change" if spec.resumable else "kept"
        meaning = spec.doc
        if spec.before is not ALWAYS:
            meaning += f"; a run saved before this field reads as `{spec.before!r}`"
        rows.append(f"| `{prefix}{name}` | {shown} | {spec.allowed()} | {resume} | {meaning} |")
    return "\n".join(rows)


def _kind_of(default: Any) -> str:
    for kind, types in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if isinstance(default, types):
            return kind
    raise TypeError(f"give the kind of a field whose default is {default!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)
