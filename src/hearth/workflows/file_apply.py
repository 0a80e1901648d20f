"""Workflow definitions declared in the registry file's ``workflows:`` section, applied by ``hearth apply``
and by every process at start, like the rest of the file.

Why here and not in :mod:`hearth.registry`: a definition is checked against the task types of the process
and the workflows already registered, which the registry knows nothing of. The contract, shared with
``POST /api/v1/workflows``:

* every definition is checked with the same :func:`~hearth.workflows.definitions.validate_definition`
  *before anything is written* (the caller checks, then applies the registry, then stores), and the first
  problem is an ``invalid_request`` whose ``param`` is the path in the file — ``workflows[2].steps[0].needs[1]``;
* the definitions are stored in one transaction (:meth:`DefinitionStore.store`): all or none;
* each is versioned as by the API: a definition equal to its name's newest version adds nothing.

A ``subworkflow`` step may run a workflow registered before, or one listed earlier in the section; a name
listed twice is refused.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hearth.errors import HearthError
from hearth.workflows.definition_store import DefinitionStore
from hearth.workflows.definitions import WorkflowDefinition, validate_definition


@dataclass(frozen=True, slots=True)
class WorkflowApplyReport:
    """What an apply did, as ``name vN`` labels."""

    created: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()


def check_workflows(raws: Sequence[Any], *, known_task_types: Collection[str],
                    registered: Collection[str]) -> list[WorkflowDefinition]:
    """Validate the section's definitions, in order; raise ``invalid_request`` naming the path at fault."""
    out: list[WorkflowDefinition] = []
    known = set(registered)
    for i, raw in enumerate(raws):
        where = f"workflows[{i}]"
        if not isinstance(raw, Mapping):
            raise HearthError("invalid_request", f"{where}: a workflow definition is a mapping "
                              "(name, steps, …).", param=where)
        name = raw.get("name")
        if isinstance(name, str) and name in {d.name for d in out}:
            raise HearthError("invalid_request", f"{where}.name: workflow `{name}` is listed twice in the file.",
                              param=f"{where}.name")
        try:
            definition = validate_definition(raw, known_task_types=known_task_types, known_workflows=known)
        except HearthError as exc:
            param = f"{where}.{exc.param}" if exc.param else where
            problem = exc.message.removeprefix(f"{exc.param}: ") if exc.param else exc.message
            of = f" (workflow `{name}`)" if isinstance(name, str) else ""
            raise HearthError(exc.code, f"{param}: {problem}{of}", param=param, details=exc.details) from None
        known.add(definition.name)
        out.append(definition)
    return out


async def apply_workflows(store: DefinitionStore, definitions: Sequence[WorkflowDefinition]) -> WorkflowApplyReport:
    """Store definitions checked by :func:`check_workflows`, in one transaction."""
    stored = await store.store(definitions)
    return WorkflowApplyReport(
        created=tuple(f"{row['name']} v{row['version']}" for row, created in stored if created),
        unchanged=tuple(f"{row['name']} v{row['version']}" for row, created in stored if not created))
