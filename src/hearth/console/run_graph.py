"""A workflow run's graph as inline SVG, laid out on the server: no script, no library, nothing fetched.

Steps are boxes coloured by their state (the stylesheet's ``s-<state>`` classes); edges come from the run's
definition version (:func:`hearth.workflows.definitions.edges`: ``needs``, a condition's ``then``/``else``,
``on_error``, ``on_timeout``, a loop body's edge to its loop) and are drawn left to right. The layout is layered:
a step's column is the length of the longest path of edges leading to it, so every edge points right; within a
column steps keep their declaration order. Each box links to the step's row in the page (``#step-<id>``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from markupsafe import Markup, escape

from hearth.workflows.definitions import Edge

NODE_W: Final = 168
NODE_H: Final = 46
GAP_X: Final = 64
GAP_Y: Final = 18
PAD: Final = 16
MAX_LABEL: Final = 22


@dataclass(frozen=True, slots=True)
class Node:
    step_id: str
    kind: str
    state: str
    column: int
    row: int

    @property
    def x(self) -> int:
        return PAD + self.column * (NODE_W + GAP_X)

    @property
    def y(self) -> int:
        return PAD + self.row * (NODE_H + GAP_Y)


def layers(step_ids: Sequence[str], edges: Sequence[Edge]) -> dict[str, int]:
    """Each step's column: 0 for a step no edge leads to, else one more than the furthest step leading to it.
    Relaxed at most once per step, so a cycle (which a validated definition never has) cannot loop forever."""
    column = dict.fromkeys(step_ids, 0)
    known = [e for e in edges if e.source in column and e.target in column and e.source != e.target]
    for _ in range(len(step_ids)):
        moved = False
        for e in known:
            if column[e.target] < column[e.source] + 1:
                column[e.target] = column[e.source] + 1
                moved = True
        if not moved:
            break
    return column


def layout(steps: Sequence[tuple[str, str, str]], edges: Sequence[Edge]) -> list[Node]:
    """``steps`` as (id, kind, state) in declaration order → their boxes, column by column."""
    column = layers([s for s, _, _ in steps], edges)
    rows: dict[int, int] = {}
    nodes = []
    for step_id, kind, state in steps:
        c = column[step_id]
        nodes.append(Node(step_id, kind, state, c, rows.get(c, 0)))
        rows[c] = rows.get(c, 0) + 1
    return nodes


def _short(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[:MAX_LABEL - 1] + "…"


def _edge(a: Node, b: Node, kind: str) -> str:
    x1, y1 = a.x + NODE_W, a.y + NODE_H / 2
    x2, y2 = b.x - 4, b.y + NODE_H / 2
    bend = max(24.0, (x2 - x1) / 2)
    path = (f'<path class="edge e-{escape(kind)}" d="M{x1} {y1:.1f} C{x1 + bend:.1f} {y1:.1f} {x2 - bend:.1f} '
            f'{y2:.1f} {x2} {y2:.1f}" marker-end="url(#arrow)"><title>{escape(a.step_id)} → {escape(b.step_id)} '
            f'({escape(kind)})</title></path>')
    if kind == "needs":
        return path
    return path + (f'<text class="edge-label" x="{(x1 + x2) / 2:.1f}" y="{(y1 + y2) / 2 - 4:.1f}" '
                   f'text-anchor="middle">{escape(kind)}</text>')


def run_graph(steps: Sequence[tuple[str, str, str]], edges: Sequence[Edge]) -> Markup:
    """The SVG of a run: ``steps`` as (id, kind, state) in declaration order, ``edges`` of its definition."""
    nodes = layout(steps, edges)
    by_id: Mapping[str, Node] = {n.step_id: n for n in nodes}
    columns = max((n.column for n in nodes), default=0) + 1
    rows = max((n.row for n in nodes), default=0) + 1
    width = 2 * PAD + columns * (NODE_W + GAP_X) - GAP_X
    height = 2 * PAD + rows * (NODE_H + GAP_Y) - GAP_Y
    parts = [f'<svg class="run-graph" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="run graph">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z" class="arrow-head"/></marker></defs>']
    parts += [_edge(by_id[e.source], by_id[e.target], e.kind) for e in edges
              if e.source in by_id and e.target in by_id and e.source != e.target]
    for n in nodes:
        sid, state = escape(n.step_id), escape(n.state)
        parts.append(f'<a href="#step-{sid}"><g class="node s-{state}" data-step="{sid}" data-state="{state}">'
                     f'<title>{sid} ({escape(n.kind)}): {state}</title>'
                     f'<rect x="{n.x}" y="{n.y}" width="{NODE_W}" height="{NODE_H}" rx="6"/>'
                     f'<text class="node-id" x="{n.x + 10}" y="{n.y + 19}">{escape(_short(n.step_id))}</text>'
                     f'<text class="node-sub" x="{n.x + 10}" y="{n.y + 36}">{escape(n.kind)} · {state}</text></g></a>')
    parts.append("</svg>")
    return Markup("".join(parts))
