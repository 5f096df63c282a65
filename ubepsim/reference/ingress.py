"""The ingress ports: each die's port takes the stores arriving from other dies one at a time."""

from __future__ import annotations

from .state import Die, Run


def ingress(run: Run, dies: list[Die]) -> None:
    """Every store reaches its destination's inbox; each destination's port serves the arrivals
    from other dies in order (arrival, source, the source's store order), and a store becomes
    visible once the port has taken it, after its ingress cost. A port starts free at its die's
    ingress_free (a layer's combine: once the dispatch's last store to it landed), and ends
    there."""
    for die in dies:
        for st in die.stores:
            dies[st.dst].inbox.append(st)
    for d, die in enumerate(dies):
        free = die.ingress_free
        for st in sorted((x for x in die.inbox if x.src != d),
                         key=lambda x: (x.arrival, x.src, x.seq)):
            st.visible = max(st.arrival, free) + st.cost(run.c, "ingress")
            free = st.visible
        die.ingress_free = free
