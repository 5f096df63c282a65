"""The ingress ports: each die's port takes the stores arriving from other dies one at a time."""

from __future__ import annotations

from .state import Die, Run


def ingress(run: Run, dies: list[Die]) -> None:
    """Every store reaches its destination's inbox; each destination's port serves the arrivals
    from other dies in order (arrival, source, the source's store order), and a store becomes
    visible once the port has taken it, after its ingress cost."""
    for die in dies:
        for st in die.stores:
            dies[st.dst].inbox.append(st)
    for d, die in enumerate(dies):
        free = 0
        for st in sorted((x for x in die.inbox if x.src != d),
                         key=lambda x: (x.arrival, x.src, x.seq)):
            st.visible = max(st.arrival, free) + st.cost(run.c, "ingress")
            free = st.visible
